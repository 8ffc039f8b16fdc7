"""The bytes a remote scorer and its server exchange: safetensors, never pickle.

A request is one safetensors blob: ``images`` ``[B, 3, H, W]`` float32 in ``[0, 1]``, with the
scene graphs (docs/design.md §3.1 JSON) and the ``heatmaps`` flag in its string metadata. A response is
one blob with ``scores.{i}`` ``[K_i]`` and, when asked, ``heatmaps.{i}`` ``[K_i, H, W]``. Why
safetensors: unpickling bytes from a network port runs whatever they say; safetensors only
ever yields tensors, and the format is already a dependency.

The server cannot trust the bytes: :func:`decode_request` refuses, before any scorer sees them,
images that are not float32 in ``[0, 1]`` (uint8, NaN/inf, out of range), empty batches and
0-pixel images, and graphs nested too deep for ``json`` (a :class:`WireError`, a 400), and
requests over the server's image count or side (:class:`WireTooLarge`, a 413), the last two read
from the header before any tensor is built. :func:`encode_request` is not checked: policies
decode to clamped float32 already, and it is the server that must not trust its input.

A served scorer can require a token (:func:`load_token`, sent as ``Authorization: Bearer``). It
comes from a file or the ``CAST_SCORER_TOKEN`` environment variable, never from config.toml,
which every run saves.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import torch

from cast_core.scene_graph import SceneGraph
from cast_core.types import AtomScores

__all__ = [
    "encode_request",
    "decode_request",
    "encode_response",
    "decode_response",
    "WireError",
    "WireTooLarge",
    "load_token",
    "TOKEN_ENV",
]

TOKEN_ENV = "CAST_SCORER_TOKEN"
MAX_HEADER_BYTES = 100_000_000  # safetensors' own bound on its JSON header


class WireError(ValueError):
    """Bytes that are not a well-formed request or response; the message is one line."""


class WireTooLarge(WireError):
    """A well-formed request over one of the server's limits: a 413, not a 400."""


def encode_request(images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool) -> bytes:
    from safetensors.torch import save

    meta = {"graphs": json.dumps([g.to_dict() for g in graphs]), "heatmaps": "1" if heatmaps else "0"}
    return save({"images": images.detach().float().cpu().contiguous()}, metadata=meta)


def decode_request(
    blob: bytes, *, max_images: int | None = None, max_side: int | None = None
) -> tuple[torch.Tensor, list[SceneGraph], bool]:
    """The images, scene graphs and heatmap flag of a request, or a one-line :class:`WireError`."""
    header = _header(blob)
    entry = header.get("images")
    shape = entry.get("shape") if isinstance(entry, dict) else None
    if not (isinstance(shape, list) and len(shape) == 4 and all(type(d) is int and d >= 0 for d in shape)) or (
        shape[1] != 3
    ):
        raise WireError("the request holds no 'images' tensor shaped [B, 3, H, W]")
    n, _, h, w = shape
    if n == 0:
        raise WireError("the request holds an empty batch (0 images); send at least one image")
    if h == 0 or w == 0:
        raise WireError(f"the request's images are {h}x{w} pixels; each side must be at least 1")
    if max_images is not None and n > max_images:
        raise WireTooLarge(f"{n} images in one request exceed the server's limit of {max_images} (--max-images)")
    if max_side is not None and max(h, w) > max_side:
        raise WireTooLarge(f"images of {h}x{w} pixels exceed the server's limit of {max_side} a side (--max-side)")
    if entry.get("dtype") != "F32":
        raise WireError(f"images must be float32 in [0, 1], not {entry.get('dtype')}")
    tensors, meta = _load(blob, header)
    images = tensors["images"]
    if not bool(torch.isfinite(images).all()):
        raise WireError("images must be float32 in [0, 1]; these hold NaN or inf")
    low, high = float(images.min()), float(images.max())
    if low < 0.0 or high > 1.0:
        raise WireError(f"images must be float32 in [0, 1]; these range from {low:g} to {high:g}")
    try:
        raw = json.loads(meta.get("graphs", ""))
        if not isinstance(raw, list):
            raise TypeError(f"expected a list of scene graphs, got {type(raw).__name__}")
        graphs = [SceneGraph.from_dict(g) for g in raw]
    except RecursionError:
        raise WireError("the request's scene graphs are nested too deep to be docs/design.md §3.1 JSON") from None
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise WireError(f"the request's scene graphs are not valid docs/design.md §3.1 JSON: {err}") from None
    if len(graphs) != n:
        raise WireError(f"{n} images but {len(graphs)} scene graphs")
    return images, graphs, meta.get("heatmaps") == "1"


def encode_response(scores: AtomScores) -> bytes:
    from safetensors.torch import save

    tensors = {f"scores.{i}": s.detach().float().cpu().contiguous() for i, s in enumerate(scores.scores)}
    for i, h in enumerate(scores.heatmaps or []):
        tensors[f"heatmaps.{i}"] = h.detach().float().cpu().contiguous()
    return save(tensors, metadata={"images": str(len(scores.scores)), "heatmaps": "1" if scores.heatmaps else "0"})


def decode_response(blob: bytes, graphs: Sequence[SceneGraph]) -> AtomScores:
    tensors, meta = _load(blob)
    n = int(meta.get("images", -1))
    if n != len(graphs):
        raise WireError(f"the response holds {n} images' scores for {len(graphs)} asked")
    scores = [tensors[f"scores.{i}"] for i in range(n)]
    maps = [tensors[f"heatmaps.{i}"] for i in range(n)] if meta.get("heatmaps") == "1" else None
    return AtomScores(graphs=list(graphs), scores=scores, heatmaps=maps)


def _header(blob: bytes) -> dict:
    """The JSON header of a safetensors blob: an 8-byte little-endian length, then JSON."""
    size = int.from_bytes(blob[:8], "little")
    if len(blob) < 8 or size > min(len(blob) - 8, MAX_HEADER_BYTES):
        raise WireError("not a safetensors blob (its header length is wrong)")
    try:
        header = json.loads(blob[8 : 8 + size])
    except RecursionError:
        raise WireError("not a safetensors blob (its header is nested too deep)") from None
    except ValueError as err:
        raise WireError(f"not a safetensors blob ({type(err).__name__})") from None
    if not isinstance(header, dict):
        raise WireError("not a safetensors blob (its header is not a JSON object)")
    return header


def _load(blob: bytes, header: dict | None = None) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and string metadata of a safetensors blob; the in-memory ``load`` does not return
    the metadata, so it is read from the header."""
    from safetensors.torch import load

    header = _header(blob) if header is None else header
    try:
        tensors = load(blob)
    except Exception as err:  # noqa: BLE001 - any malformed bytes
        raise WireError(f"not a safetensors blob ({type(err).__name__})") from None
    meta = header.get("__metadata__") or {}
    if not isinstance(meta, dict):
        raise WireError("not a safetensors blob (its metadata is not a JSON object)")
    return tensors, meta


def load_token(token_file: str | os.PathLike | None = None, *, environ: dict | None = None) -> str | None:
    """A served scorer's shared secret: ``token_file``'s one line if given, else the
    ``CAST_SCORER_TOKEN`` environment variable, else None (no token). A file that is missing,
    empty or unreadable, or the variable set but empty, is a one-line ConfigError: running
    without the token its user meant to give would be worse than stopping."""
    from cast_core.errors import ConfigError

    environ = os.environ if environ is None else environ
    make = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
    if token_file is not None and str(token_file) != "":
        path = Path(token_file).expanduser()
        hint = f"write one random line into it, e.g. {make} > {path}"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"token file {path} does not exist; {hint}") from None
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"cannot read token file {path} ({type(err).__name__}: {err})") from None
        where, token = f"token file {path}", text.strip()
    elif TOKEN_ENV in environ:
        where, token = f"the {TOKEN_ENV} environment variable", environ[TOKEN_ENV].strip()
        hint = f"set it to a random token (e.g. the output of {make}) or unset it"
    else:
        return None
    if not token:
        raise ConfigError(f"{where} is empty; {hint}")
    if not all(33 <= ord(c) < 127 for c in token):
        raise ConfigError(f"{where} must hold one token of printable ASCII, without spaces or line breaks")
    return token
