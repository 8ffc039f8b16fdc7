"""`cast serve-scorer` exposed to callers it cannot trust: a token on every endpoint, no tokenless
bind beyond loopback unless --insecure, bodies counted as read (chunked too) and cut off at the
limit with 413, and bad images or graphs a 400 that never reaches the judge. The server runs
in this process (uvicorn on a free loopback port, in a thread) so tests can look at what it read."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest
import torch

from cast_core.errors import ConfigError, ScorerUnavailable
from cast_core.launch import free_port
from cast_core.testing.fakes import LeftBrightnessScorer, simple_graph
from cast_rewards.remote import RemoteScorer
from cast_rewards.remote_wire import TOKEN_ENV, decode_request, encode_request, load_token

TOKEN = "s3cret-token_for-tests"
LIMIT = 1 * 2**20  # the test server's body limit: small, so a refused body is cheap to send
MAX_IMAGES, MAX_SIDE = 4, 64


class Judge(LeftBrightnessScorer):
    """Counts the images that reach it: a refused request must not."""

    seen = 0

    def score(self, images, graphs, heatmaps=False):
        Judge.seen += len(images)
        return super().score(images, graphs, heatmaps)


class Service:
    def __init__(self, **options):
        import uvicorn

        from cast_rewards.serve import make_app

        self.app = make_app(Judge(), "left-brightness", max_wait_ms=0, **options)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="error", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)

    def close(self):
        self.server.should_exit = True
        self.thread.join(10)

    @property
    def body_bytes_read(self) -> int:
        return self.app.state.stats["body_bytes_read"]


@pytest.fixture(scope="module")
def service():
    s = Service(token=TOKEN, max_request_bytes=LIMIT, max_images=MAX_IMAGES, max_side=MAX_SIDE)
    yield s
    s.close()


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def inputs(n=2, h=16, w=24, seed=0):
    images = torch.rand(n, 3, h, w, generator=torch.Generator().manual_seed(seed))
    return images, [simple_graph("a red circle") for _ in range(n)]


def request(url, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection(urlsplit(url).hostname, urlsplit(url).port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read().decode(errors="replace")
    finally:
        conn.close()


def post(url, body, headers=AUTH):
    return request(url, "POST", "/score", body, headers)


def raw_request(images, graphs_json, heatmaps="0"):
    """A request built without encode_request, so it can say what a client would not."""
    from safetensors.torch import save

    return save({"images": images.contiguous()}, metadata={"graphs": graphs_json, "heatmaps": heatmaps})


def graphs_json(n):
    return json.dumps([simple_graph("a red circle").to_dict()] * n)


# -- the token ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/health", "/score"])
@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"}],
    ids=["none", "wrong", "no scheme", "basic"],
)
def test_no_or_a_wrong_token_is_401_in_one_line(service, path, headers):
    before = Judge.seen
    body = encode_request(*inputs(), False) if path == "/score" else None
    status, text = request(service.url, "GET" if path == "/health" else "POST", path, body, headers)
    assert status == 401
    assert text.count("\n") == 1 and text.startswith("unauthorized: this scorer service needs 'Authorization: Bearer")
    assert Judge.seen == before


def test_the_right_token_is_served(service):
    assert request(service.url, "GET", "/health", headers=AUTH)[0] == 200
    assert request(service.url, "GET", "/health", headers={"Authorization": f"bearer {TOKEN}"})[0] == 200
    images, graphs = inputs()
    status, _ = post(service.url, encode_request(images, graphs, False))
    assert status == 200


def test_the_remote_client_sends_the_token_from_its_file_or_the_environment(service, tmp_path, monkeypatch):
    images, graphs = inputs()
    local = LeftBrightnessScorer().score(images, graphs)
    (tmp_path / "token").write_text(TOKEN + "\n")
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    by_file = RemoteScorer(service.url, token_file=str(tmp_path / "token")).score(images, graphs)
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    by_env = RemoteScorer(service.url).score(images, graphs)
    assert RemoteScorer(service.url).health()["status"] == "ok"
    for remote in (by_file, by_env):
        assert all(torch.equal(a, b) for a, b in zip(remote.scores, local.scores))


def test_a_refused_token_stops_the_client_at_once_and_says_how_to_give_it(service, tmp_path, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    started = time.monotonic()
    needs = f"refused the request \\(401\\): it needs a token: give scorer_kwargs.token_file=FILE or set {TOKEN_ENV}"
    with pytest.raises(ScorerUnavailable, match=f"remote scorer {service.url} {needs}"):
        RemoteScorer(service.url, retries=3, backoff=5).score(*inputs())
    assert time.monotonic() - started < 4  # not retried (a retry would sleep 5 s first)
    (tmp_path / "token").write_text("not-it")
    with pytest.raises(ScorerUnavailable, match=f"the token from token file {tmp_path / 'token'} is not the one"):
        RemoteScorer(service.url, token_file=str(tmp_path / "token"), retries=0).score(*inputs())
    with pytest.raises(ScorerUnavailable, match="refused the request \\(401\\)"):
        RemoteScorer(service.url).health()


def test_the_token_itself_is_no_scorer_argument():
    with pytest.raises(ConfigError, match="would be saved in the run's config.toml; put the token in a file"):
        RemoteScorer("http://127.0.0.1:1", token=TOKEN)


def test_token_files_and_the_variable_that_cannot_be_used_are_one_line(tmp_path):
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "spaced").write_text("two words\n")
    (tmp_path / "dir").mkdir()
    cases = {
        str(tmp_path / "missing"): "does not exist; write one random line into it",
        str(tmp_path / "empty"): "is empty",
        str(tmp_path / "spaced"): "must hold one token of printable ASCII",
        str(tmp_path / "dir"): "cannot read token file",
    }
    for path, message in cases.items():
        with pytest.raises(ConfigError, match=message) as err:
            load_token(path, environ={})
        assert "\n" not in str(err.value) and path in str(err.value)
    with pytest.raises(ConfigError, match=f"the {TOKEN_ENV} environment variable is empty"):
        load_token(None, environ={TOKEN_ENV: " "})
    assert load_token(None, environ={}) is None
    assert load_token(None, environ={TOKEN_ENV: "abc"}) == "abc"
    (tmp_path / "good").write_text("from-file\n")
    assert load_token(tmp_path / "good", environ={TOKEN_ENV: "abc"}) == "from-file"


# -- binding -----------------------------------------------------------------------------------


def test_a_tokenless_judge_is_not_served_beyond_loopback_unless_insecure():
    from cast_rewards.commands import check_exposure

    for host in ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"]:
        assert check_exposure(host, has_token=False, insecure=False) is None
    for host in ["0.0.0.0", "::", "10.0.0.5", "judge-host"]:
        with pytest.raises(ConfigError, match=f"refusing to serve on {host} without a token.*--token-file FILE"):
            check_exposure(host, has_token=False, insecure=False)
        assert check_exposure(host, has_token=True, insecure=False) is None
        warning = check_exposure(host, has_token=False, insecure=True)
        assert warning.startswith(f"warning: serving on {host} without a token (--insecure)")


def test_the_cli_refuses_before_loading_the_judge(tmp_path, monkeypatch):
    """The scorer named does not exist: a refusal that came after loading it would say so instead
    (and a missing check would not start serving, which would hang this test)."""
    from click.testing import CliRunner

    from cast_core.cli import cli, install_plugin_commands

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    install_plugin_commands(cli)
    serve = ["serve-scorer", "--scorer", "no-such-judge"]
    exposed = CliRunner().invoke(cli, [*serve, "--host", "0.0.0.0"])
    assert exposed.exit_code == 1 and len(exposed.output.strip().splitlines()) == 1
    assert exposed.output.startswith("Error: refusing to serve on 0.0.0.0 without a token")
    missing = CliRunner().invoke(cli, [*serve, "--token-file", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and len(missing.output.strip().splitlines()) == 1
    assert missing.output.startswith(f"Error: token file {tmp_path / 'nope'} does not exist")


def test_the_cli_defaults_are_the_servers():
    from cast_rewards import commands, serve

    assert (commands.MAX_REQUEST_MB, commands.MAX_IMAGES, commands.MAX_SIDE) == (
        serve.MAX_REQUEST_MB,
        serve.MAX_IMAGES,
        serve.MAX_SIDE,
    )


# -- limits ------------------------------------------------------------------------------------


def test_too_many_images_or_too_large_a_side_is_413(service):
    before = Judge.seen
    status, text = post(service.url, encode_request(*inputs(MAX_IMAGES + 1, 8, 8), False))
    assert status == 413 and text == (
        f"request too large: {MAX_IMAGES + 1} images in one request exceed the server's limit of {MAX_IMAGES} "
        "(--max-images)\n"
    )
    status, text = post(service.url, encode_request(*inputs(1, 8, MAX_SIDE + 1), False))
    assert status == 413 and f"exceed the server's limit of {MAX_SIDE} a side (--max-side)" in text
    assert Judge.seen == before
    assert post(service.url, encode_request(*inputs(MAX_IMAGES, MAX_SIDE, MAX_SIDE), False))[0] == 200


def test_the_client_names_the_limit_when_its_request_is_too_large(service, monkeypatch):
    """Within the socket buffers the client reads the 413; far beyond them its upload is reset
    first: either way the one line names --max-request-mb, and the small request still works."""
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    for n in (4, 48):  # 1.2 and 14 MiB of images, against a limit of 1 MiB
        big, graphs = inputs(n, 160, 160)
        with pytest.raises(ScorerUnavailable, match="--max-request-mb"):
            RemoteScorer(service.url, retries=0).score(big, graphs)
    assert len(RemoteScorer(service.url).score(*inputs(2)).scores) == 2


def test_a_declared_content_length_over_the_limit_is_413_before_reading(service):
    conn = socket.create_connection(("127.0.0.1", service.port), timeout=10)
    with conn:
        conn.sendall(
            f"POST /score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Length: {LIMIT * 100}\r\n\r\n".encode()
        )
        conn.sendall(b"\0" * 1000)
        status, text = _read_response(conn)
    assert status == 413 and text == "request body over the server's limit of 1 MiB (--max-request-mb)\n"
    assert service.body_bytes_read == 0


def test_a_chunked_body_over_the_limit_is_cut_off_near_the_limit(service):
    """No Content-Length: the server counts what it reads and stops just past the limit; the
    client is cut off long before it could send its 64 MiB."""
    chunk = b"\0" * 65536
    sent = 0
    conn = socket.create_connection(("127.0.0.1", service.port), timeout=10)
    with conn:
        conn.sendall(
            f"POST /score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n".encode()
        )
        try:
            while sent < 64 * 2**20:
                conn.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                sent += len(chunk)
        except OSError:  # the server closed the connection: what it had to say is already here
            pass
        status, text = _read_response(conn)
    assert status == 413 and text.startswith("request body over the server's limit of 1 MiB")
    # uvicorn hands the app what one socket read brought (at most 256 KiB past its 64 KiB mark)
    assert LIMIT < service.body_bytes_read <= LIMIT + 512 * 1024, service.body_bytes_read
    assert sent < 32 * 2**20, sent


def _read_response(conn: socket.socket) -> tuple[int, str]:
    data = b""
    while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + _length(data):
        try:
            more = conn.recv(65536)
        except ConnectionResetError:
            break
        if not more:
            break
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


# -- decoding: a 400 that never reaches the judge ----------------------------------------------


def _deep_graphs(depth=100_000):
    return "[" * depth + "]" * depth


BAD = {
    "deep graph": (lambda: raw_request(torch.rand(1, 3, 8, 8), _deep_graphs()), "nested too deep"),
    "uint8": (
        lambda: raw_request(torch.zeros(1, 3, 8, 8, dtype=torch.uint8), graphs_json(1)),
        "images must be float32 in [0, 1], not U8",
    ),
    "NaN": (
        lambda: raw_request(torch.full((1, 3, 8, 8), float("nan")), graphs_json(1)),
        "images must be float32 in [0, 1]; these hold NaN or inf",
    ),
    "inf": (
        lambda: raw_request(torch.full((1, 3, 8, 8), float("inf")), graphs_json(1)),
        "images must be float32 in [0, 1]; these hold NaN or inf",
    ),
    "out of range": (
        lambda: raw_request(torch.linspace(-0.5, 2.0, 192).reshape(1, 3, 8, 8), graphs_json(1)),
        "images must be float32 in [0, 1]; these range from -0.5 to 2",
    ),
    "0x0": (lambda: raw_request(torch.zeros(1, 3, 0, 0), graphs_json(1)), "images are 0x0 pixels"),
    "empty": (lambda: raw_request(torch.zeros(0, 3, 8, 8), "[]"), "empty batch (0 images)"),
    "graphs not a list": (lambda: raw_request(torch.rand(1, 3, 8, 8), '{"a": 1}'), "expected a list"),
    "graph not an object": (lambda: raw_request(torch.rand(1, 3, 8, 8), "[[1]]"), "must be a JSON object"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_images_or_graphs_are_400_in_one_line(service, case):
    make, message = BAD[case]
    before = Judge.seen
    status, text = post(service.url, make())
    assert status == 400, text
    assert text.count("\n") == 1 and text.startswith("bad request: ") and message in text, text
    assert Judge.seen == before


def test_what_the_client_encodes_is_what_the_server_accepts():
    """Policies decode to clamped float32: encode_request keeps it so, so the new checks refuse
    nothing a trainer sends (the extremes 0 and 1 included)."""
    images = torch.rand(2, 3, 8, 8, dtype=torch.float64)
    images[0, 0, 0, 0], images[1, 2, 7, 7] = 0.0, 1.0
    blob = encode_request(images, [simple_graph("a cat")] * 2, False)
    got, graphs, _ = decode_request(blob, max_images=2, max_side=8)
    assert got.dtype == torch.float32 and torch.equal(got, images.float()) and len(graphs) == 2
