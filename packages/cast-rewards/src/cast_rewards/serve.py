"""``cast serve-scorer``: any registered atom scorer as an HTTP service (Starlette on uvicorn), so
the judge runs on other GPUs or another node than the policy.

Endpoints: ``GET /health`` (``{"status": "ok", "scorer": ..., "requests": n, "batches": m}``) and
``POST /score`` (a safetensors request, :mod:`cast_rewards.remote_wire`; the answer is a
safetensors response, or a 4xx with one line of text for a bad request).

Concurrent requests are batched: requests that arrive within ``max_wait_ms`` of each other (up to
about ``max_batch`` images — a request is never split, so the last one may overshoot — same image
size and heatmap flag) go to the scorer in one call; if that call fails, each request is scored on
its own, so one bad request fails alone. The call runs
on the server's own thread; requests arriving during it wait and form the next batch (``/health``
answers between calls). A judge is many times faster
on one batch of 32 images than on eight of 4 — eight trainer processes calling one judge is the
case this is for.

Exposed to a network, the service must not trust its callers (docs/rewards.md, "The judge as a
service"). With a token, every endpoint answers 401 to a request without ``Authorization: Bearer
<token>`` (compared in constant time). The body is read as a stream and counted, so a request
over ``max_request_bytes`` is refused with 413 as soon as it passes the limit, whatever its
Content-Length says or whether it has one (a chunked body once slipped past a header-only check
and was buffered whole). Image count and side are checked from the safetensors header, and
malformed images or graphs are a 400 that never reaches the judge
(:func:`cast_rewards.remote_wire.decode_request`). Refusals before the body is read close the
connection, so the client cannot keep sending into a server that stopped listening.
"""

from __future__ import annotations

import asyncio
import hmac
from dataclasses import dataclass, field
from typing import Any

import torch

from cast_core.types import AtomScores
from cast_rewards.remote_wire import WireError, WireTooLarge, decode_request, encode_response

__all__ = ["make_app", "Batcher", "serve", "MAX_REQUEST_MB", "MAX_IMAGES", "MAX_SIDE"]

MAX_REQUEST_MB, MAX_IMAGES, MAX_SIDE = 512, 256, 4096  # defaults of --max-request-mb, --max-images, --max-side


class _TooLarge(Exception):
    pass


@dataclass
class _Pending:
    images: torch.Tensor
    graphs: list
    heatmaps: bool
    done: asyncio.Future = field(default=None)  # type: ignore[assignment]


class Batcher:
    """Collects concurrent score requests into scorer calls."""

    def __init__(self, scorer: Any, *, max_batch: int = 32, max_wait_ms: float = 10.0):
        self.scorer, self.max_batch, self.max_wait = scorer, int(max_batch), float(max_wait_ms) / 1000.0
        self.queue: asyncio.Queue | None = None
        self.requests = 0
        self.batches = 0
        self._worker: asyncio.Task | None = None

    async def score(self, images: torch.Tensor, graphs: list, heatmaps: bool) -> AtomScores:
        if self.queue is None:
            self.queue = asyncio.Queue()
            self._worker = asyncio.get_running_loop().create_task(self._run())
        item = _Pending(images, graphs, heatmaps, asyncio.get_running_loop().create_future())
        self.requests += 1
        await self.queue.put(item)
        return await item.done

    async def _run(self) -> None:
        assert self.queue is not None
        while True:
            first = await self.queue.get()
            batch = [first]
            deadline = asyncio.get_running_loop().time() + self.max_wait
            while sum(len(p.images) for p in batch) < self.max_batch:
                timeout = deadline - asyncio.get_running_loop().time()
                if timeout <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self.queue.get(), timeout))
                except asyncio.TimeoutError:
                    break
            for group in _compatible(batch):
                await self._call(group)

    async def _call(self, group: list[_Pending]) -> None:
        images = torch.cat([p.images for p in group])
        graphs = [g for p in group for g in p.graphs]
        self.batches += 1
        try:
            # on the event loop's own thread, deliberately: torch ran ~1.6x slower in a worker
            # thread here (a 2-core CPU; two OpenMP pools competing is the likely cause). Requests
            # that arrive meanwhile wait in the socket's backlog and form the next batch.
            out = self.scorer.score(images, graphs, group[0].heatmaps)
        except Exception as err:  # noqa: BLE001 - one request's bad input must not fail its batch mates
            if len(group) > 1:
                for p in group:  # each on its own: only the request that fails gets the error
                    await self._call([p])
                return
            if not group[0].done.done():
                group[0].done.set_exception(err)
            return
        start = 0
        for p in group:
            n = len(p.images)
            part = AtomScores(
                graphs=p.graphs,
                scores=out.scores[start : start + n],
                heatmaps=None if out.heatmaps is None else out.heatmaps[start : start + n],
            )
            start += n
            if not p.done.done():
                p.done.set_result(part)


def _compatible(batch: list[_Pending]) -> list[list[_Pending]]:
    """Requests that can share one scorer call: same image size and heatmap flag."""
    groups: dict[tuple, list[_Pending]] = {}
    for p in batch:
        groups.setdefault((tuple(p.images.shape[1:]), p.heatmaps), []).append(p)
    return list(groups.values())


def make_app(
    scorer: Any,
    name: str,
    *,
    max_batch: int = 32,
    max_wait_ms: float = 10.0,
    max_request_bytes: int = MAX_REQUEST_MB * 2**20,
    max_images: int = MAX_IMAGES,
    max_side: int = MAX_SIDE,
    token: str | None = None,
):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    batcher = Batcher(scorer, max_batch=max_batch, max_wait_ms=max_wait_ms)
    expected = None if token is None else token.encode()
    stats = {"body_bytes_read": 0}  # of the last /score request, for tests: how far a refused body was read

    def refuse(status: int, line: str, **headers: str):
        # the connection is closed after a refusal: the rest of an unread body is not worth reading
        return PlainTextResponse(line + "\n", status_code=status, headers={"Connection": "close", **headers})

    def unauthorized(request: Request):
        if expected is None:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")  # the scheme is case-insensitive (RFC 9110)
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode("latin-1", "replace"), expected):
            return None
        what = "a wrong token" if header else "no token"
        return refuse(
            401,
            f"unauthorized: this scorer service needs 'Authorization: Bearer <token>' and got {what}",
            **{"WWW-Authenticate": "Bearer"},
        )

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_request_bytes:
            stats["body_bytes_read"] = 0
            raise _TooLarge
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            stats["body_bytes_read"] = size
            if size > max_request_bytes:
                raise _TooLarge
            chunks.append(chunk)
        return b"".join(chunks)

    async def health(request: Request):
        if (refusal := unauthorized(request)) is not None:
            return refusal
        return JSONResponse({"status": "ok", "scorer": name, "requests": batcher.requests, "batches": batcher.batches})

    async def score(request: Request):
        if (refusal := unauthorized(request)) is not None:
            return refusal
        try:
            body = await read_body(request)
        except _TooLarge:
            mib = max_request_bytes / 2**20
            return refuse(413, f"request body over the server's limit of {mib:g} MiB (--max-request-mb)")
        try:
            images, graphs, heatmaps = decode_request(body, max_images=max_images, max_side=max_side)
        except WireTooLarge as err:
            return PlainTextResponse(f"request too large: {err}\n", status_code=413)
        except WireError as err:
            return PlainTextResponse(f"bad request: {err}\n", status_code=400)
        del body
        try:
            out = await batcher.score(images, graphs, heatmaps)
        except Exception as err:  # noqa: BLE001 - the scorer's own failure on this request, one line
            # 422, not 5xx: the server works, this request cannot be scored; the client does not
            # retry it and the trainer skips the group, as it would a local scorer's failure
            return PlainTextResponse(
                f"scorer {name!r} failed on this request: {type(err).__name__}: {err}\n", status_code=422
            )
        return Response(encode_response(out), media_type="application/octet-stream")

    app = Starlette(routes=[Route("/health", health), Route("/score", score, methods=["POST"])])
    app.state.batcher = batcher
    app.state.stats = stats
    return app


def serve(scorer: Any, name: str, host: str, port: int, **options: Any) -> None:
    import uvicorn

    uvicorn.run(make_app(scorer, name, **options), host=host, port=port, log_level="warning")
