"""`cast serve-scorer` under load on loopback, with hostile requests mixed in (issue 41, part D).

The service runs in its own process with a token and small limits (so oversized requests are
cheap to send), serving the cheap ``left-brightness`` judge. ``--clients`` threads (default 8)
send requests for ``--seconds`` (default 60). Most are good: a few images, with heatmaps every
other time, through the ``remote`` scorer with its token file; their answers must equal local
scoring of the same images. Every ``--bad-every``-th request is bad, in turn: no token, a wrong
token, /health without a token, not safetensors, uint8 / NaN / out-of-range images, an empty
batch, a graph nested 100,000 deep, too many images, too large a side, a body over the limit
with its Content-Length, and a chunked one without. Each must get its own 4xx, and the service
must still answer /health at the end.

Printed and written (``--json``, default benchmarks/results/scorer-service-load.json): requests
per second and p50 / p99 latency of the good requests, the counts of each bad kind, and ``ok``.
Run: ``python benchmarks/scorer_service_load.py [--seconds 60] [--clients 8] [--json FILE]``.
The number of requests is bounded by the time; a request that hangs is cut off by its timeout.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import torch

RESULT = Path(__file__).resolve().parent / "results" / "scorer-service-load.json"
TOKEN = "load-test-token-4f1c9a"
LIMITS = {"max_request_mb": 4, "max_images": 16, "max_side": 256}
GOOD_SHAPE = (4, 3, 64, 64)  # images per good request, and their size
TIMEOUT_S = 30.0


def _graphs(n: int):
    from cast_core.testing.fakes import simple_graph

    prompts = ["a red circle", "two cats", "a dog on a sofa", "three blue squares"]
    return [simple_graph(prompts[i % len(prompts)]) for i in range(n)]


def _raw(images: torch.Tensor, graphs_json: str) -> bytes:
    """A request built by hand, so it can hold what encode_request would never send."""
    from safetensors.torch import save

    return save({"images": images.contiguous()}, metadata={"graphs": graphs_json, "heatmaps": "0"})


def _one_graph_json(n: int) -> str:
    return json.dumps([g.to_dict() for g in _graphs(n)])


def _post(port: int, path: str, body: bytes | None, headers: dict, method: str = "POST") -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def _oversized(port: int, size: int, chunked: bool) -> int:
    """Send a ``size``-byte body (chunked: without Content-Length) until the server cuts it off,
    then read its answer, which is already in the socket's buffer."""
    auth = f"Authorization: Bearer {TOKEN}\r\n"
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    chunk, sent = b"\0" * 65536, 0
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as conn:
        conn.sendall(f"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}{framing}\r\n\r\n".encode())
        try:
            while sent < size:
                conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                sent += len(chunk)
        except OSError:  # cut off, as it should be
            pass
        data = b""
        while b"\r\n" not in data:
            try:
                more = conn.recv(4096)
            except OSError:
                break
            if not more:
                break
            data += more
    return int(data.split()[1]) if data.startswith(b"HTTP/1.1 ") else 0


def bad_requests() -> list[tuple[str, int, object]]:
    """(kind, expected status, send(port) -> status) for every hostile request the load mixes in."""
    from cast_rewards.remote_wire import encode_request

    good = encode_request(torch.rand(*GOOD_SHAPE), _graphs(GOOD_SHAPE[0]), False)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    limit = LIMITS["max_request_mb"] * 2**20
    one, many = _one_graph_json(1), LIMITS["max_images"] + 1
    bodies = {
        "not safetensors": b"\x07" * 64,
        "uint8 images": _raw(torch.zeros(1, 3, 8, 8, dtype=torch.uint8), one),
        "NaN images": _raw(torch.full((1, 3, 8, 8), float("nan")), one),
        "out-of-range images": _raw(torch.full((1, 3, 8, 8), 1.5), one),
        "empty batch": _raw(torch.zeros(0, 3, 8, 8), "[]"),
        "graph nested 100,000 deep": _raw(torch.rand(1, 3, 8, 8), "[" * 100_000 + "]" * 100_000),
        "too many images": _raw(torch.rand(many, 3, 8, 8), _one_graph_json(many)),
        "too large a side": _raw(torch.rand(1, 3, 8, LIMITS["max_side"] + 1), one),
    }
    status = {"too many images": 413, "too large a side": 413}
    out: list[tuple[str, int, object]] = [
        ("no token", 401, lambda port: _post(port, "/score", good, {})),
        ("wrong token", 401, lambda port: _post(port, "/score", good, {"Authorization": "Bearer nope"})),
        ("/health without a token", 401, lambda port: _post(port, "/health", None, {}, method="GET")),
    ]
    for kind, body in bodies.items():
        out.append((kind, status.get(kind, 400), lambda port, body=body: _post(port, "/score", body, auth)))
    out.append(("over the limit, Content-Length", 413, lambda port: _oversized(port, limit + 2**20, chunked=False)))
    out.append(("over the limit, chunked", 413, lambda port: _oversized(port, limit + 2**20, chunked=True)))
    return out


def _start(token_file: Path, log) -> tuple[subprocess.Popen, int]:
    from cast_core.launch import free_port

    port = free_port()
    cmd = [
        sys.executable, "-c", "from cast_core.cli import main; main()", "serve-scorer",
        "--scorer", "left-brightness", "--port", str(port), "--token-file", str(token_file),
        "--max-request-mb", str(LIMITS["max_request_mb"]), "--max-images", str(LIMITS["max_images"]),
        "--max-side", str(LIMITS["max_side"]),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"serve-scorer exited with {proc.returncode}")
        if _health(port) == 200:
            return proc, port
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("serve-scorer did not come up in 60 s")


def _health(port: int) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/health", headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def run_load(seconds: float = 60.0, clients: int = 8, bad_every: int = 10, pool: int = 16) -> dict:
    """The load test; returns the measurements and the checks (``ok`` when every one holds)."""
    from cast_core.testing.fakes import LeftBrightnessScorer
    from cast_rewards.remote import RemoteScorer

    local = LeftBrightnessScorer()
    inputs = []
    for i in range(pool):  # distinct images per request, scored locally once
        images = torch.rand(*GOOD_SHAPE, generator=torch.Generator().manual_seed(i))
        graphs, maps = _graphs(GOOD_SHAPE[0]), bool(i % 2)
        inputs.append((images, graphs, maps, local.score(images, graphs, heatmaps=maps)))
    bad = bad_requests()
    lock = threading.Lock()
    latencies: list[float] = []
    good = {"count": 0, "mismatched": 0, "failed": 0}
    bad_seen = {kind: {"expected": want, "sent": 0, "as_expected": 0, "other": []} for kind, want, _ in bad}

    with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "server.log", "wb") as log:
        token_file = Path(tmp) / "token"
        token_file.write_text(TOKEN + "\n")
        proc, port = _start(token_file, log)
        url = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        deadline = started + seconds
        turn = [0]

        def client(c: int) -> None:
            scorer = RemoteScorer(url, token_file=str(token_file), timeout=TIMEOUT_S, retries=0)
            i = 0
            while time.monotonic() < deadline:
                i += 1
                if i % bad_every == 0:
                    with lock:
                        kind, want, send = bad[turn[0] % len(bad)]
                        turn[0] += 1
                    try:
                        got = send(port)
                    except Exception as err:  # noqa: BLE001 - recorded, the check fails
                        got = f"{type(err).__name__}: {err}"
                    with lock:
                        seen = bad_seen[kind]
                        seen["sent"] += 1
                        if got == want:
                            seen["as_expected"] += 1
                        else:
                            seen["other"].append(got)
                    continue
                images, graphs, maps, expected = inputs[(c * 7 + i) % len(inputs)]
                t0 = time.perf_counter()
                try:
                    out = scorer.score(images, graphs, heatmaps=maps)
                except Exception:  # noqa: BLE001 - counted, the check fails
                    with lock:
                        good["failed"] += 1
                    continue
                elapsed = time.perf_counter() - t0
                same = all(torch.equal(a, b) for a, b in zip(out.scores, expected.scores)) and (
                    not maps or all(torch.equal(a, b) for a, b in zip(out.heatmaps, expected.heatmaps))
                )
                with lock:
                    good["count"] += 1
                    good["mismatched"] += 0 if same else 1
                    latencies.append(elapsed)

        threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 4 * TIMEOUT_S)
        wall = time.monotonic() - started
        health_at_end = _health(port)
        server_up = proc.poll() is None and health_at_end == 200
        proc.kill()
        proc.wait()

    latencies.sort()
    pct = (lambda q: 1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))]) if latencies else None
    checks = {
        "every good request scored": good["failed"] == 0 and good["count"] > 0,
        "every good answer equals local scoring": good["mismatched"] == 0,
        "every bad request got its 4xx": all(s["sent"] and s["as_expected"] == s["sent"] for s in bad_seen.values()),
        "the server answers /health at the end": server_up,
        "no client hung": not any(t.is_alive() for t in threads),
    }
    return {
        "seconds": seconds,
        "wall_s": round(wall, 2),
        "clients": clients,
        "bad_every": bad_every,
        "scorer": "left-brightness",
        "good_request": {"images": GOOD_SHAPE[0], "size": list(GOOD_SHAPE[2:]), "heatmaps": "every other"},
        "limits": LIMITS,
        "cpus": os.cpu_count(),
        "good": {
            **good,
            "requests_per_s": round(good["count"] / wall, 1),
            "images_per_s": round(good["count"] * GOOD_SHAPE[0] / wall, 1),
            "p50_ms": round(pct(0.50), 1) if latencies else None,
            "p99_ms": round(pct(0.99), 1) if latencies else None,
            "mean_ms": round(1000 * statistics.fmean(latencies), 1) if latencies else None,
        },
        "bad": bad_seen,
        "checks": checks,
        "ok": all(checks.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--bad-every", type=int, default=10, help="every N-th request of a client is a bad one")
    parser.add_argument("--json", dest="json_path", default=str(RESULT), help="write the results here")
    args = parser.parse_args()

    result = run_load(args.seconds, args.clients, args.bad_every)
    g = result["good"]
    print(f"{args.clients} clients, {result['wall_s']} s, left-brightness, {GOOD_SHAPE[0]} images of 64x64 a request")
    print(f"good requests: {g['count']} ({g['requests_per_s']}/s, {g['images_per_s']} images/s)")
    print(f"  latency p50 {g['p50_ms']} ms, p99 {g['p99_ms']} ms; failed {g['failed']}, unlike local {g['mismatched']}")
    for kind, s in result["bad"].items():
        other = f"; other: {s['other'][:3]}" if s["other"] else ""
        print(f"  {kind:32s} {s['as_expected']}/{s['sent']} got {s['expected']}{other}")
    for check, held in result["checks"].items():
        print(f"{'OK  ' if held else 'FAIL'} {check}")
    Path(args.json_path).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json_path).write_text(json.dumps(result, indent=2) + "\n")
    if not result["ok"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
