"""The ``remote`` atom scorer: a client of ``cast serve-scorer`` (``scorer_kwargs.url``).

Each ``score`` call is one POST of safetensors bytes (:mod:`cast_rewards.remote_wire`). What
happens when it goes wrong:

* the connection is refused or reset, or the server answers 502/503/504 (a proxy, a restart):
  tried again ``retries`` more times, ``backoff`` seconds apart, then
  :class:`~cast_core.errors.ScorerUnavailable`, which stops a training run with the URL and the
  last error;
* no answer within ``timeout`` seconds (each socket operation is bounded by it):
  ``ScorerUnavailable`` at once — resending would queue the same work again on a server that is
  still busy with it;
* a 401 (no token, or the wrong one) or a 413 (a request over the server's limits):
  ``ScorerUnavailable`` at once, naming what to change; every later request would be refused the
  same way, so skipping groups would train on nothing;
* another 4xx (a request the server refuses, or a scorer that failed on this request, 422): a
  plain error, not retried; the trainer skips that group, as it does when a local scorer fails.

A server started with a token (``cast serve-scorer --token-file``) wants it on every request:
``token_file`` names a file holding it, else the ``CAST_SCORER_TOKEN`` environment variable is
used. The token itself is never a scorer argument, because config.toml saves those.
"""

from __future__ import annotations

import http.client
import socket
import time
import urllib.error
import urllib.request
from typing import Sequence

import torch

from cast_core.errors import ScorerUnavailable
from cast_core.scene_graph import SceneGraph
from cast_core.types import AtomScores
from cast_rewards.remote_wire import TOKEN_ENV, decode_response, encode_request, load_token

__all__ = ["RemoteScorer", "RETRYABLE"]

RETRYABLE = (502, 503, 504)  # a proxy or a restarting server: worth another try


class RemoteScorer:
    def __init__(
        self,
        url: str | None = None,
        *,
        timeout: float = 300.0,
        retries: int = 2,
        backoff: float = 2.0,
        token_file: str | None = None,
        token: str | None = None,
    ):
        from cast_core.errors import ConfigError

        if not url:
            raise ValueError(
                "the remote scorer needs url= (e.g. --set scorer_kwargs.url=http://judge-host:8410), "
                "where `cast serve-scorer` runs"
            )
        if token is not None:
            raise ConfigError(
                "scorer_kwargs.token would be saved in the run's config.toml; put the token in a file and "
                f"give scorer_kwargs.token_file=FILE, or set {TOKEN_ENV}"
            )
        self.url = url.rstrip("/")
        self.timeout, self.retries, self.backoff = float(timeout), int(retries), float(backoff)
        self.token_file = token_file
        self._token = load_token(token_file)

    def _headers(self) -> dict[str, str]:
        return {} if self._token is None else {"Authorization": f"Bearer {self._token}"}

    def _refused(self, code: int, detail: str) -> ScorerUnavailable:
        if code == 401:
            if self._token is None:
                how = f"it needs a token: give scorer_kwargs.token_file=FILE or set {TOKEN_ENV}"
            else:
                source = f"token file {self.token_file}" if self.token_file else TOKEN_ENV
                how = f"the token from {source} is not the one `cast serve-scorer` was started with"
            return ScorerUnavailable(f"remote scorer {self.url} refused the request (401): {how}")
        return ScorerUnavailable(
            f"remote scorer {self.url} refuses requests this large (413: {detail}); "
            "raise the server's --max-request-mb / --max-images / --max-side, or send smaller batches"
        )

    def health(self) -> dict:
        import json

        request = urllib.request.Request(f"{self.url}/health", headers=self._headers())
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as err:
            if err.code == 401:
                raise self._refused(401, "") from None
            raise

    def score(self, images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool = False) -> AtomScores:
        body = encode_request(images, graphs, heatmaps)
        last, cut_off = "", False
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * attempt)
            request = urllib.request.Request(
                f"{self.url}/score",
                data=body,
                method="POST",
                headers={"Content-Type": "application/octet-stream", **self._headers()},
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return decode_response(response.read(), graphs)
            except urllib.error.HTTPError as err:
                detail = err.read().decode(errors="replace").strip()
                if err.code in (401, 413):
                    raise self._refused(err.code, detail) from None
                if err.code not in RETRYABLE:
                    raise RuntimeError(f"remote scorer {self.url} ({err.code}): {detail}") from None
                last = f"HTTP {err.code}: {detail}"
            except (TimeoutError, socket.timeout) as err:
                raise ScorerUnavailable(
                    f"remote scorer {self.url} did not answer within {self.timeout:g} s "
                    f"({err}); raise scorer_kwargs.timeout if the judge is just slow"
                ) from None
            except urllib.error.URLError as err:
                if isinstance(err.reason, (TimeoutError, socket.timeout)):
                    raise ScorerUnavailable(
                        f"remote scorer {self.url} did not answer within {self.timeout:g} s "
                        "(raise scorer_kwargs.timeout if the judge is just slow)"
                    ) from None
                last = f"{type(err.reason).__name__}: {err.reason}"
                cut_off = isinstance(err.reason, (ConnectionResetError, BrokenPipeError))
            except (ConnectionError, http.client.HTTPException) as err:  # reset or closed mid-answer
                last = f"{type(err).__name__}: {err}"
                cut_off = isinstance(err, (ConnectionResetError, BrokenPipeError))
        if cut_off and len(body) > 2**20:
            # a server refuses a body over its --max-request-mb by closing the connection, and an
            # upload much larger than the socket buffers sees that reset before the 413 can be read
            last += (
                f" (the request held {len(body) / 2**20:.1f} MiB: if that is over the server's "
                "--max-request-mb, raise it or send smaller batches)"
            )
        raise ScorerUnavailable(
            f"remote scorer {self.url} did not answer after {self.retries + 1} tries; "
            f"last error: {last}. Is `cast serve-scorer` running there?"
        )
