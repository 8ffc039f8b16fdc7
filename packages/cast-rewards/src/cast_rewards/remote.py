"""The ``remote`` atom scorer: a client of ``cast serve-scorer`` (``scorer_kwargs.url``).

Each ``score`` call is one POST of safetensors bytes (:mod:`cast_rewards.remote_wire`). A server
that does not answer within ``timeout`` seconds, refuses the connection or answers 5xx is tried
again ``retries`` more times with ``backoff`` seconds between tries; after that a
:class:`~cast_core.errors.ScorerUnavailable` stops the run with the URL and the last error — a
trainer must never hang on a dead judge, nor quietly skip every group. A 4xx (a request the
server refuses) is not retried: it would be refused again.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from typing import Sequence

import torch

from cast_core.errors import ScorerUnavailable
from cast_core.scene_graph import SceneGraph
from cast_core.types import AtomScores
from cast_rewards.remote_wire import decode_response, encode_request

__all__ = ["RemoteScorer"]


class RemoteScorer:
    def __init__(self, url: str | None = None, *, timeout: float = 300.0, retries: int = 2, backoff: float = 2.0):
        if not url:
            raise ValueError("the remote scorer needs url= (e.g. --set scorer_kwargs.url=http://judge-host:8410), "
                             "where `cast serve-scorer` runs")
        self.url = url.rstrip("/")
        self.timeout, self.retries, self.backoff = float(timeout), int(retries), float(backoff)

    def health(self) -> dict:
        import json

        with urllib.request.urlopen(f"{self.url}/health", timeout=self.timeout) as r:
            return json.loads(r.read())

    def score(self, images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool = False) -> AtomScores:
        body = encode_request(images, graphs, heatmaps)
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * attempt)
            request = urllib.request.Request(f"{self.url}/score", data=body, method="POST",
                                             headers={"Content-Type": "application/octet-stream"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return decode_response(response.read(), graphs)
            except urllib.error.HTTPError as err:
                detail = err.read().decode(errors="replace").strip()
                if err.code < 500:
                    raise ValueError(f"remote scorer {self.url} refused the request ({err.code}): {detail}") from None
                last = f"HTTP {err.code}: {detail}"
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as err:
                last = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
        raise ScorerUnavailable(f"remote scorer {self.url} did not answer after {self.retries + 1} tries "
                                f"(timeout {self.timeout:g} s each); last error: {last}. Is `cast serve-scorer` "
                                "running there?")
