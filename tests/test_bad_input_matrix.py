"""The bad-input matrix: what a new user gets wrong, each answered by one line that names the
thing and the fix — never a traceback, never silence, and never a changed file of an existing
run (every file in the workspace is hashed before and after each case).

Each case runs the installed ``cast`` in a fresh process, as a user would."""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from cast_core.testing.fakes import fake_run_args
from conftest import run_cast

PROMPTS = ["a red circle", "a blue square", "two green triangles"]
FAKE = fake_run_args(prompts=PROMPTS, group_size=4, num_steps=4, window_size=2, sample_every=0, checkpoint_every=1)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """A workspace with a finished run, config files good and bad, and damaged images."""
    from PIL import Image

    w = tmp_path_factory.mktemp("ws")
    out = run_cast("train", *FAKE, "--steps", "2", "--out", str(w / "run"))
    assert out.returncode == 0, out.stderr
    (w / "mixed.toml").write_text("steps = 5\n[train]\nlr = 0.1\n")
    (w / "broken.toml").write_text("steps = = 5\n")
    (w / "typo.toml").write_text("# my run\nsteps = 5\nrnk = 4\n")
    (w / "code.toml").write_text('prompts = "os:listdir"\n')
    (w / "nonempty").mkdir()
    (w / "nonempty" / "notes.txt").write_text("mine")
    (w / "afile").write_text("x")
    Image.fromarray((np.random.default_rng(0).random((32, 32, 3)) * 255).astype("uint8")).save(w / "ok.png")
    data = (w / "ok.png").read_bytes()
    (w / "trunc.png").write_bytes(data[: len(data) // 2])
    (w / "bomb.png").write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0))
        + _png_chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + _png_chunk(b"IEND", b"")
    )
    (w / "notimage.txt").write_text("hello")
    (w / "bad.json").write_text("{not json")
    (w / "bench").mkdir()
    (w / "bench" / "plan.json").write_text(json.dumps({"steps": 1}))
    (w / "damaged").mkdir()
    return w


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


RUN = "{ws}/run"
CASES = [
    # --- cast train: settings that would be ignored, wrong or unsafe
    (
        "window-start-under-selector",
        ["train", "--set", "window_start=9", "--out", "{ws}/new1"],
        1,
        r"window_start would be ignored: .* --window fixed",
    ),
    (
        "mixed-config-layout",
        ["train", "--config", "{ws}/mixed.toml", "--out", "{ws}/new1"],
        1,
        r"mixed.toml: key\(s\) steps sit beside a \[train\] table",
    ),
    ("broken-toml", ["train", "--config", "{ws}/broken.toml"], 1, r"broken.toml is not valid TOML: .*line 1"),
    ("missing-config", ["train", "--config", "{ws}/nope.toml"], 1, r"config file .*nope.toml does not exist"),
    ("config-typo-with-line", ["train", "--config", "{ws}/typo.toml"], 1, r"typo.toml:3: unknown config key 'rnk'"),
    (
        "code-prompts-in-config",
        ["train", "--config", "{ws}/code.toml", "--out", "{ws}/new1"],
        1,
        r"would import and run code from module 'os'; pass --allow-code-prompts",
    ),
    (
        "code-prompts-in-set",
        ["train", "--set", 'prompts="os:listdir"', "--out", "{ws}/new1"],
        1,
        r"--allow-code-prompts",
    ),
    ("policy-kwargs-typo", ["train", "--set", "policy_kwargs.rnk=4", "--out", "{ws}/new1"], 1, r"rnk"),
    ("window-kwargs-typo", ["train", "--set", "window_kwargs.sizee=2", "--out", "{ws}/new1"], 1, r"sizee"),
    (
        "scorer-kwargs-bad-value",
        ["train", "--set", 'scorer_kwargs.count_maps="extra"', "--out", "{ws}/new1"],
        1,
        r"count_maps",
    ),
    ("prompts-not-text", ["train", "--set", "prompts=[1, 2]", "--out", "{ws}/new1"], 1, r"prompts"),
    (
        "image-size-bad",
        ["train", "--set", "image_size=[0, 0]", "--out", "{ws}/new1"],
        1,
        r"'image_size': \[0, 0\] is not \[height, width\]",
    ),
    (
        "image-size-policy-refuses",
        ["train", "--set", "image_size=[64, 64]", "--out", "{ws}/new1"],
        1,
        r"image_size \[64, 64\]: policy 'shapes' says: the shapes policy draws \(32, 32\) images",
    ),
    ("negative-eta", ["train", "--set", "eta=-0.1"], 1, r"eta"),
    ("zero-clip-range", ["train", "--set", "clip_range=0"], 1, r"clip_range"),
    ("group-size-zero", ["train", "--set", "group_size=0"], 1, r"group_size"),
    ("lr-not-a-number", ["train", "--set", "lr=abc"], 1, r"lr"),
    ("unknown-key", ["train", "--set", "lerning_rate=1e-4"], 1, r"unknown config key 'lerning_rate'"),
    ("unknown-recipe", ["train", "--plugin", "nosuch"], 1, r"nosuch"),
    ("unknown-scorer", ["train", "--scorer", "nosuch"], 1, r"nosuch"),
    # --- cast train: run directories
    (
        "out-holds-a-run",
        ["train", *FAKE, "--out", RUN],
        1,
        r"already holds a run; continue it with `cast train --resume",
    ),
    ("out-not-empty", ["train", *FAKE, "--out", "{ws}/nonempty"], 1, r"nonempty is not empty .* new or empty --out"),
    ("out-is-a-file", ["train", *FAKE, "--out", "{ws}/afile"], 2, r"afile' is a file"),
    ("resume-changes-seed", ["train", "--resume", RUN, "--set", "seed=3"], 2, r"--resume cannot change seed"),
    (
        "resume-changes-policy",
        ["train", "--resume", RUN, "--policy", "shapes"],
        2,
        r"only --steps and --set may change",
    ),
    ("resume-fewer-steps", ["train", "--resume", RUN, "--steps", "1"], 2, r"already at step 2; give --steps above 2"),
    ("resume-missing-dir", ["train", "--resume", "{ws}/nope"], 2, r"does not exist"),
    ("resume-no-config", ["train", "--resume", "{ws}/nonempty"], 1, r"config.toml does not exist"),
    # --- outputs checked before the work
    (
        "sample-out-suffix",
        ["sample", "--policy", "shapes", "-p", "a red circle", "-o", "{ws}/x.xyz"],
        2,
        r"suffix '.xyz'",
    ),
    (
        "sample-out-is-dir",
        ["sample", "--policy", "shapes", "-p", "a red circle", "-o", "{ws}/nonempty"],
        2,
        r"is a directory",
    ),
    (
        "sample-out-under-file",
        ["sample", "--policy", "shapes", "-p", "a red circle", "-o", "{ws}/afile/x.png"],
        2,
        r"afile is a file, not a directory",
    ),
    (
        "sample-adapter-is-run",
        ["sample", "--policy", "shapes", "-p", "a red circle", "-o", "{ws}/x.png", "--adapter", RUN],
        2,
        r"RUN/checkpoints/step-N/adapter",
    ),
    (
        "eval-out-is-dir",
        ["eval", "--policy", "shapes", "--suite", "single", "--out", "{ws}/nonempty"],
        2,
        r"is a directory",
    ),
    (
        "eval-grid-suffix",
        ["eval", "--policy", "shapes", "--suite", "single", "--grid", "{ws}/g.txt"],
        2,
        r"suffix '.txt'",
    ),
    ("eval-unknown-suite", ["eval", "--policy", "shapes", "--suite", "nosuch"], 1, r"nosuch"),
    ("eval-no-prompts", ["eval", "--policy", "shapes"], 2, r"exactly one of --suite or --prompts"),
    (
        "eval-bad-baseline",
        ["eval", "--policy", "shapes", "--suite", "single", "--baseline", "{ws}/bad.json"],
        2,
        r"bad.json is not a readable JSON file",
    ),
    # --- inputs
    ("score-truncated-png", ["score", "{ws}/trunc.png", "-p", "a red circle"], 1, r"trunc.png is damaged"),
    ("score-bomb-png", ["score", "{ws}/bomb.png", "-p", "a red circle"], 1, r"bomb.png declares more than"),
    ("score-missing-image", ["score", "{ws}/nope.png", "-p", "a red circle"], 1, r"nope.png does not exist"),
    ("score-not-an-image", ["score", "{ws}/notimage.txt", "-p", "a red circle"], 1, r"notimage.txt is not an image"),
    ("score-unknown-scorer", ["score", "{ws}/ok.png", "-p", "a red circle", "--scorer", "nosuch"], 1, r"nosuch"),
    (
        "compare-billion-seeds",
        ["compare", "--policy", "shapes", "--adapter", RUN, "--suite", "single", "--seeds", "0-1000000000"],
        2,
        r"seeds",
    ),
    (
        "compare-one-seed",
        ["compare", "--policy", "shapes", "--adapter", RUN, "--suite", "single", "--seeds", "3"],
        2,
        r"at least two distinct seeds",
    ),
    ("report-missing-dir", ["report", "{ws}/nope"], 2, r"does not exist"),
    ("bench-unknown-method", ["bench", "--method", "nosuch"], 1, r"unknown method\(s\) nosuch"),
    ("bench-other-plan", ["bench", "--quick", "--out", "{ws}/bench"], 1, r"holds a bench with another plan"),
]


@pytest.mark.parametrize("name, args, code, message", CASES, ids=[c[0] for c in CASES])
def test_bad_input(ws, name, args, code, message):
    import re

    before = snapshot(ws)
    out = run_cast(*[a.format(ws=ws) for a in args])
    errors = [line for line in out.stderr.splitlines() if line.startswith("Error")]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.returncode == code, (out.returncode, out.stderr[-2000:])
    assert len(errors) == 1, out.stderr
    assert re.search(message, errors[0]), errors[0]
    assert len(errors[0]) < 600, len(errors[0])
    assert snapshot(ws) == before


def test_the_matrix_is_large():
    assert len(CASES) >= 40


def test_a_long_prompt_is_cut_in_the_error():
    out = run_cast("decompose", " ".join(["blorp"] * 5000), "--decomposer", "template")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert max(len(line) for line in out.stderr.splitlines()) < 800  # three quotes cut to ~120-240 characters each
