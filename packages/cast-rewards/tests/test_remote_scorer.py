"""`cast serve-scorer` and the `remote` scorer on 127.0.0.1: the same scores and heatmaps as the
local scorer, concurrent clients batched, bad requests refused in one line, and a dead server a
clear error that stops training instead of a hang or silently skipped groups."""

import json
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
import torch

from cast_core.errors import ScorerUnavailable
from cast_core.launch import free_port
from cast_core.testing.fakes import LeftBrightnessScorer, simple_graph
from cast_rewards.remote import RemoteScorer
from cast_rewards.remote_wire import WireError, decode_request, decode_response, encode_request, encode_response

CLI = [sys.executable, "-c", "from cast_core.cli import main; main()"]


def start_server(scorer="left-brightness", *extra):
    port = free_port()
    proc = subprocess.Popen(
        [*CLI, "serve-scorer", "--scorer", scorer, "--port", str(port), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as r:
                if json.loads(r.read())["status"] == "ok":
                    return proc, url
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(proc.stderr.read())
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("serve-scorer did not come up in 30 s")


@pytest.fixture(scope="module")
def server():
    proc, url = start_server("left-brightness", "--max-wait-ms", "50")
    yield url
    proc.kill()
    proc.wait()


def inputs(n=3, seed=0):
    images = torch.rand(n, 3, 16, 24, generator=torch.Generator().manual_seed(seed))
    return images, [simple_graph(p) for p in ["a red circle", "two cats", "a dog"][:n]]


def test_wire_round_trip_and_bad_bytes():
    images, graphs = inputs()
    got_images, got_graphs, maps = decode_request(encode_request(images, graphs, True))
    assert torch.equal(got_images, images) and got_graphs == graphs and maps is True
    local = LeftBrightnessScorer().score(images, graphs, heatmaps=True)
    back = decode_response(encode_response(local), graphs)
    assert all(torch.equal(a, b) for a, b in zip(back.scores, local.scores))
    assert all(torch.equal(a, b) for a, b in zip(back.heatmaps, local.heatmaps))
    with pytest.raises(WireError, match="not a safetensors blob"):
        decode_request(b"\x00" * 20)


def test_remote_scores_equal_local(server):
    images, graphs = inputs()
    for heatmaps in (False, True):
        local = LeftBrightnessScorer().score(images, graphs, heatmaps=heatmaps)
        remote = RemoteScorer(server).score(images, graphs, heatmaps=heatmaps)
        assert all(torch.equal(a, b) for a, b in zip(remote.scores, local.scores))
        if heatmaps:
            assert all(torch.equal(a, b) for a, b in zip(remote.heatmaps, local.heatmaps))
        else:
            assert remote.heatmaps is None


def test_eight_concurrent_clients_are_batched(server):
    before = RemoteScorer(server).health()
    results, errors = {}, []

    def client(i):
        try:
            images, graphs = inputs(2, seed=i)
            results[i] = (RemoteScorer(server).score(images, graphs, heatmaps=True), images, graphs)
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(results) == 8
    for remote, images, graphs in results.values():  # every client got its own images' answers
        local = LeftBrightnessScorer().score(images, graphs, heatmaps=True)
        assert all(torch.equal(a, b) for a, b in zip(remote.scores, local.scores))
    after = RemoteScorer(server).health()
    assert after["requests"] - before["requests"] == 8
    assert after["batches"] - before["batches"] < 8  # at least two requests shared a scorer call


def test_a_bad_request_gets_one_line_and_is_not_retried(server):
    request = urllib.request.Request(f"{server}/score", data=b"not safetensors", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 400
    assert err.value.read().decode().strip() == "bad request: not a safetensors blob (its header length is wrong)"


def test_a_server_killed_mid_run_is_a_clear_error_after_bounded_retries():
    proc, url = start_server()
    judge = RemoteScorer(url, timeout=2, retries=2, backoff=0.05)
    judge.score(*inputs())  # it was serving
    proc.kill()
    proc.wait()
    started = time.monotonic()
    with pytest.raises(ScorerUnavailable, match=f"remote scorer {url} did not answer after 3 tries"):
        judge.score(*inputs())
    assert time.monotonic() - started < 10


def test_training_stops_on_an_unreachable_judge(tmp_path):
    """The trainer skips a group whose scoring failed, but an unreachable judge stops the run."""
    from cast_core.config import TrainConfig
    from cast_core.trainer import Trainer

    dead = f"http://127.0.0.1:{free_port()}"
    cfg = TrainConfig(
        policy="fake",
        scorer="remote",
        scorer_kwargs={"url": dead, "timeout": 2, "retries": 1, "backoff": 0.05},
        decomposer="fake",
        prompts=["a red circle"],
        group_size=2,
        prompts_per_step=1,
        num_steps=4,
        window_start=0,
        window_size=2,
        steps=1,
        sample_every=0,
    ).validate()
    trainer = Trainer(cfg, tmp_path / "run", log=lambda m: None)
    with pytest.raises(ScorerUnavailable, match="did not answer after 2 tries"):
        trainer.run()


class TestRemoteConformance:
    """The AtomScorer contract, through the wire (the served scorer is left-brightness)."""

    @pytest.fixture(autouse=True)
    def _url(self, server):
        self.url = server

    def test_contract(self):
        from cast_core.testing.conformance import AtomScorerConformance

        kit = AtomScorerConformance()
        kit.make_scorer = lambda: RemoteScorer(self.url)
        kit.make_inputs = lambda: inputs()
        for name in [n for n in dir(kit) if n.startswith("test_")]:
            getattr(kit, name)()


class _Scripted:
    """A stand-in HTTP server answering POST /score with a fixed status (or never), counting."""

    def __init__(self, status=None, delay=0.0):
        import http.server

        outer = self
        self.count = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                outer.count += 1
                self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(delay)
                self.send_response(status or 200)
                self.end_headers()
                self.wfile.write(b"scripted failure\\n")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("status,tries,error", [(422, 1, RuntimeError), (503, 3, ScorerUnavailable)])
def test_what_is_retried(status, tries, error):
    """A scorer failure on this request (422) is not retried and skips the group; a restarting
    server (503) is retried, then stops the run."""
    fake = _Scripted(status)
    try:
        with pytest.raises(error):
            RemoteScorer(fake.url, timeout=5, retries=2, backoff=0.01).score(*inputs())
        assert fake.count == tries
    finally:
        fake.close()


def test_a_silent_server_times_out_once_without_resending():
    fake = _Scripted(200, delay=3.0)
    try:
        started = time.monotonic()
        with pytest.raises(ScorerUnavailable, match="did not answer within 0.5 s"):
            RemoteScorer(fake.url, timeout=0.5, retries=2, backoff=0.01).score(*inputs())
        assert fake.count == 1 and time.monotonic() - started < 3
    finally:
        fake.close()


def test_one_bad_request_fails_alone_in_its_batch():
    import asyncio

    from cast_rewards.serve import Batcher

    class Picky:
        calls = 0

        def score(self, images, graphs, heatmaps=False):
            Picky.calls += 1
            if any(g.prompt == "bad" for g in graphs):
                raise ValueError("cannot judge 'bad'")
            return LeftBrightnessScorer().score(images, graphs, heatmaps)

    async def main():
        batcher = Batcher(Picky(), max_batch=8, max_wait_ms=50)
        images, graphs = inputs(2)
        good = batcher.score(images, graphs, False)
        bad = batcher.score(images[:1], [simple_graph("bad")], False)
        return await asyncio.gather(good, bad, return_exceptions=True)

    good, bad = asyncio.run(main())
    assert isinstance(bad, ValueError) and len(good.scores) == 2
    assert Picky.calls == 3  # the shared call failed, then each request on its own


def test_two_remote_services_in_one_run_train_as_the_same_scorers_locally(tmp_path, server):
    """``scorers`` with two ``remote`` entries (two services, one of them prompt-level) gives the
    adapter the same judges give in the training process."""
    from cast_core.config import TrainConfig
    from cast_core.trainer import Trainer

    second, url2 = start_server("brightness", "--max-wait-ms", "0")
    try:

        def cfg(scorers):
            return TrainConfig(
                policy="fake",
                scorer="constant",
                decomposer="fake",
                prompts=["a red circle", "two blue squares"],
                group_size=4,
                prompts_per_step=2,
                num_steps=4,
                window_start=1,
                window_size=2,
                lr=0.05,
                clip_range=0.2,
                steps=2,
                sample_every=0,
                scorers=scorers,
            )

        local = Trainer(cfg([{"name": "left-brightness"}, {"name": "brightness", "weight": 0.5}]), tmp_path / "a")
        local.run()
        remote = Trainer(
            cfg(
                [
                    {"name": "remote", "label": "left-brightness", "url": server},
                    {"name": "remote", "label": "brightness", "url": url2, "weight": 0.5, "prompt_level": True},
                ]
            ),
            tmp_path / "b",
        )
        last = remote.run()
    finally:
        second.kill()
        second.wait()
    assert "reward_gm/brightness" in last
    for p, q in zip(local.params, remote.params):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6)  # the wire carries float32 exactly
