"""The shapes oracle served by `cast serve-scorer` (cast-rewards) answers as the local oracle
(cast-shapes) does: scores and object masks, over HTTP on 127.0.0.1."""

import json
import subprocess
import sys
import time
import urllib.request

import torch

from cast_core.launch import free_port
from cast_core.registry import get_atom_decomposer, get_atom_scorer


def test_remote_oracle_equals_local():
    from cast_shapes.grammar import parse_prompt
    from cast_shapes.render import render
    from cast_shapes.world import sample_layout

    prompts = ["two red circles left of a blue square", "a green triangle"]
    images = torch.stack(
        [torch.from_numpy(render(sample_layout(parse_prompt(p), i))).float() / 255 for i, p in enumerate(prompts)]
    )
    graphs = [get_atom_decomposer("template").decompose(p) for p in prompts]
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from cast_core.cli import main; main()",
            "serve-scorer",
            "--scorer",
            "shapes-oracle",
            "--port",
            str(port),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as r:
                    assert json.loads(r.read())["scorer"] == "shapes-oracle"
                    break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.1)
        remote = get_atom_scorer("remote", url=url).score(images, graphs, heatmaps=True)
    finally:
        proc.kill()
        proc.wait()
    local = get_atom_scorer("shapes-oracle").score(images, graphs, heatmaps=True)
    for a, b in zip(remote.scores, local.scores):
        assert torch.equal(a, b)
    for a, b in zip(remote.heatmaps, local.heatmaps):
        assert torch.equal(a, b)
    assert float(local.scores[0].min()) > 0.5  # the rendered scenes satisfy their prompts
