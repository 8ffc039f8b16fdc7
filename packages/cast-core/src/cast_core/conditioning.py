"""Text conditioning as a small typed contract the policy owns.

Core never looks inside a policy's conditioning; it only needs three operations on it: take
some rows (a micro-batch, a rank's share, one prompt out of a batch), concatenate rows
(chunks of a batch, cached prompts), and move it to a device. A policy's ``encode`` may
return

* a plain tensor ``[B, …]`` (rows on dim 0: what the fake and shapes policies return), or
* any object with ``select(index)``, ``to(device)``, ``__len__`` and a classmethod
  ``concat(parts)`` — e.g. :class:`PromptEmbeds`, which handles what real text encoders give:
  per-batch padded token embeddings with a mask (Qwen-Image pads to the longest prompt of the
  batch, so two batches have different lengths), optional pooled vectors, optional members
  that are ``None``.

Anything else is refused with the policy's name, so a pytree that core would silently mishandle
(a dict whose scalars are per-row lists, a shared negative prompt stored as a row) cannot slip
through. :class:`PromptCache` builds a step's conditioning from the unique prompts, encoding
each prompt once per run.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import torch

__all__ = [
    "Conditioning",
    "PromptEmbeds",
    "select_rows",
    "concat_rows",
    "move_to",
    "num_rows",
    "PromptCache",
    "check_conditioning",
]


@runtime_checkable
class Conditioning(Protocol):
    """What a policy's ``encode`` returns when a plain tensor is not enough."""

    def __len__(self) -> int: ...

    def select(self, index: Any) -> "Conditioning":
        """Rows ``index`` (an int list or a 1-d long tensor), in that order; repeats allowed."""

    def to(self, device: Any) -> "Conditioning":
        """The same rows on ``device``."""

    @classmethod
    def concat(cls, parts: Sequence["Conditioning"]) -> "Conditioning":
        """All rows of ``parts`` in order; ragged members are padded as the class defines."""


def check_conditioning(cond: Any, who: str = "the policy") -> Any:
    """``cond`` if it is a tensor or a :class:`Conditioning`; a clear error otherwise."""
    if isinstance(cond, torch.Tensor) or isinstance(cond, Conditioning):
        return cond
    raise TypeError(
        f"{who}.encode returned {type(cond).__name__}; conditioning must be a tensor with one row per "
        f"prompt or an object with select/concat/to/__len__ (cast_core.conditioning.PromptEmbeds does this "
        f"for padded embeddings with masks)"
    )


def _index(index: Any, device: torch.device | None = None) -> torch.Tensor:
    idx = torch.as_tensor(index, dtype=torch.long)
    if idx.ndim == 0:
        idx = idx[None]
    return idx if device is None else idx.to(device)


def select_rows(cond: Any, index: Any) -> Any:
    """Rows ``index`` of a conditioning (tensor rows on dim 0, else its ``select``)."""
    if isinstance(cond, torch.Tensor):
        return cond[_index(index, cond.device)]
    return check_conditioning(cond).select(index)


def concat_rows(parts: Sequence[Any]) -> Any:
    """One conditioning holding all rows of ``parts`` in order."""
    if not parts:
        raise ValueError("concat_rows needs at least one part")
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(list(parts))
    return type(check_conditioning(first)).concat(list(parts))


def move_to(cond: Any, device: Any) -> Any:
    return check_conditioning(cond).to(device)


def num_rows(cond: Any) -> int:
    return int(cond.shape[0]) if isinstance(cond, torch.Tensor) else len(check_conditioning(cond))


def _pad_to(t: torch.Tensor, length: int, value: float | bool = 0) -> torch.Tensor:
    """``t`` ``[B, L, …]`` right-padded on dim 1 to ``length``."""
    if t.shape[1] == length:
        return t
    pad = t.new_full((t.shape[0], length - t.shape[1], *t.shape[2:]), value)
    return torch.cat([t, pad], dim=1)


@dataclass
class PromptEmbeds:
    """Token embeddings ``[B, L, D]`` with an optional boolean ``mask`` ``[B, L]`` (True = a real
    token), optional ``pooled`` ``[B, D']`` and optional ``extra`` per-row tensors ``[B, …]``
    (e.g. text position ids). Concatenating batches of different ``L`` right-pads the shorter
    with zeros and a False mask — a padded token is invisible to a policy that applies the
    mask, which is why a ragged concat without a mask is an error. ``None`` members stay
    ``None``; a member that is ``None`` in one part but not in another is an error."""

    embeds: torch.Tensor
    mask: torch.Tensor | None = None
    pooled: torch.Tensor | None = None
    extra: dict[str, torch.Tensor] | None = None

    def __post_init__(self) -> None:
        if self.embeds.ndim < 2:
            raise ValueError(f"PromptEmbeds.embeds must be [B, L, ...], got shape {tuple(self.embeds.shape)}")
        b, length = self.embeds.shape[:2]
        if self.mask is not None and tuple(self.mask.shape) != (b, length):
            raise ValueError(f"PromptEmbeds.mask must be [B, L] = [{b}, {length}], got {tuple(self.mask.shape)}")
        for name, t in (("pooled", self.pooled), *((f"extra[{k!r}]", v) for k, v in (self.extra or {}).items())):
            if t is not None and t.shape[0] != b:
                raise ValueError(f"PromptEmbeds.{name} has {t.shape[0]} rows, embeds {b}")

    def __len__(self) -> int:
        return int(self.embeds.shape[0])

    @property
    def length(self) -> int:
        return int(self.embeds.shape[1])

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> "PromptEmbeds":
        return PromptEmbeds(
            fn(self.embeds),
            None if self.mask is None else fn(self.mask),
            None if self.pooled is None else fn(self.pooled),
            None if self.extra is None else {k: fn(v) for k, v in self.extra.items()},
        )

    def select(self, index: Any) -> "PromptEmbeds":
        idx = _index(index, self.embeds.device)
        return self._map(lambda t: t[idx.to(t.device)])

    def to(self, device: Any) -> "PromptEmbeds":
        return self._map(lambda t: t.to(device))

    def trimmed(self) -> "PromptEmbeds":
        """Without the trailing positions that no row uses (all-False mask columns): a cached
        prompt then carries its own length, not that of the batch it was encoded in."""
        if self.mask is None or self.mask.all():
            return self
        used = self.mask.any(0).nonzero()
        keep = int(used.max()) + 1 if len(used) else 1
        return PromptEmbeds(
            self.embeds[:, :keep],
            self.mask[:, :keep],
            self.pooled,
            None
            if self.extra is None
            else {k: (v[:, :keep] if _is_per_token(v, self) else v) for k, v in self.extra.items()},
        )

    @classmethod
    def concat(cls, parts: Sequence["PromptEmbeds"]) -> "PromptEmbeds":
        parts = list(parts)
        lengths = {p.length for p in parts}
        length = max(lengths)
        if len(lengths) > 1 and any(p.mask is None for p in parts):
            raise ValueError(
                f"cannot concatenate prompt embeddings of lengths {sorted(lengths)} without a mask: padding would be "
                "attended to; give PromptEmbeds a mask (True = real token)"
            )
        for f in ("mask", "pooled", "extra"):
            present = {getattr(p, f) is not None for p in parts}
            if len(present) > 1:
                raise ValueError(f"cannot concatenate PromptEmbeds where {f!r} is None in some parts only")
        embeds = torch.cat([_pad_to(p.embeds, length) for p in parts])
        mask = None if parts[0].mask is None else torch.cat([_pad_to(p.mask, length, False) for p in parts])
        pooled = None if parts[0].pooled is None else torch.cat([p.pooled for p in parts])
        extra = None
        if parts[0].extra is not None:
            extra = {
                k: torch.cat(
                    [_pad_to(p.extra[k], length) if _is_per_token(p.extra[k], p) else p.extra[k] for p in parts]
                )
                for k in parts[0].extra
            }
        return cls(embeds, mask, pooled, extra)


def _is_per_token(t: torch.Tensor, owner: PromptEmbeds) -> bool:
    return t.ndim >= 2 and t.shape[1] == owner.length


class PromptCache:
    """Conditioning per prompt, computed once per run.

    ``batch(prompts)`` encodes the prompts not seen before in **one** ``encode`` call (a step's
    P unique prompts, not its P×G samples), stores each as its own row (on ``store_device``,
    the CPU by default, so thousands of cached prompts do not hold accelerator memory; trimmed
    of padding it only had because of its batch), and returns the rows for ``prompts`` in order
    on the policy's device. ``max_entries`` bounds the cache (least recently used prompts
    are dropped; 0 = unbounded, used when the text encoder is offloaded after pre-encoding).

    With ``dist`` (a :class:`~cast_core.distributed.Distributed` of several processes) encoding is
    shared: the prompts any process is missing are split among the processes, each encodes its
    part, and the rows are gathered, so a run encodes each prompt once in all, not once per
    process (an 8-process FLUX.2 run would otherwise run its 24B text encoder over every prompt
    eight times). :meth:`batch` and :meth:`warm` are then collectives: every process calls them
    the same number of times (the trainer does, once per step); ``collective=False`` encodes
    locally where only one process calls (the window measurement on the main process).
    """

    def __init__(
        self,
        encode: Callable[[list[str]], Any],
        *,
        device: Any = None,
        store_device: Any = "cpu",
        max_entries: int = 4096,
        who: str = "the policy",
        dist: Any = None,
    ):
        self.encode, self.device, self.store_device = encode, device, store_device
        self.max_entries, self.who, self.dist = int(max_entries), who, dist
        self.rows: OrderedDict[str, Any] = OrderedDict()
        self.encoded = 0  # prompts passed to encode so far (the test of "once per prompt")

    def __contains__(self, prompt: str) -> bool:
        return prompt in self.rows

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def shared(self) -> bool:
        """Whether encoding is split among several processes (see the class docstring)."""
        return self.dist is not None and self.dist.active

    def warm(
        self, prompts: Sequence[str], batch_size: int = 32, progress: Callable[[int, int], None] | None = None
    ) -> None:
        """Encode every prompt of ``prompts`` not cached yet, ``batch_size`` at a time (shared among
        the processes, and then a collective, when :attr:`shared`)."""
        todo = list(dict.fromkeys(p for p in prompts if p not in self.rows))
        if self.shared:
            self._encode_shared(todo, batch_size, progress=progress)
            return
        for i in range(0, len(todo), batch_size):
            self._encode(todo[i : i + batch_size])
            if progress:
                progress(min(i + batch_size, len(todo)), len(todo))

    def _encode_rows(self, new: list[str]) -> dict[str, Any]:
        """One ``encode`` call: each prompt's own row, trimmed of its batch's padding."""
        cond = check_conditioning(self.encode(new), self.who)
        if num_rows(cond) != len(new):
            raise ValueError(f"{self.who}.encode returned {num_rows(cond)} rows for {len(new)} prompts")
        self.encoded += len(new)
        rows = {}
        for i, prompt in enumerate(new):
            row = select_rows(cond, [i])
            rows[prompt] = row.trimmed() if isinstance(row, PromptEmbeds) else row
        return rows

    def _store(self, rows: dict[str, Any]) -> None:
        for prompt, row in rows.items():
            self.rows[prompt] = row if self.store_device is None else move_to(row, self.store_device)

    def _encode(self, new: list[str]) -> None:
        self._store(self._encode_rows(new))

    def _encode_shared(
        self, missing: list[str], batch_size: int, progress: Callable[[int, int], None] | None = None
    ) -> None:
        """A collective: the union of every process's ``missing`` prompts (one sorted order on all of
        them) is dealt out round-robin, each process encodes its part ``batch_size`` at a time (0: in
        one call), and the rows are gathered on the CPU. Every process keeps every row: a prompt a
        process did not need this step may be its samples' prompt next step (prompts are drawn
        anew each step), and encoding it again would cost what sharing saved."""
        union = sorted(set().union(*self.dist.gather_objects(sorted(set(missing)))))
        if not union:  # every process has every prompt (most steps): no second collective
            return
        mine = union[self.dist.rank :: self.dist.world]
        rows: dict[str, Any] = {}
        size = batch_size or max(len(mine), 1)  # 0: this process's whole part in one call
        for i in range(0, len(mine), size):
            rows.update(self._encode_rows(mine[i : i + size]))
            if progress:
                progress(min(i + size, len(mine)), len(mine))
        for part in self.dist.gather_objects({p: move_to(r, "cpu") for p, r in rows.items()}):
            self._store(part)

    def batch(self, prompts: Sequence[str], *, collective: bool = True) -> Any:
        """Conditioning rows for ``prompts``, in order, on :attr:`device`; prompts not cached yet are
        encoded first (shared among the processes when :attr:`shared` and ``collective``)."""
        prompts = list(prompts)
        new = list(dict.fromkeys(p for p in prompts if p not in self.rows))
        if self.shared and collective:
            self._encode_shared(new, 0)
        elif new:
            self._encode(new)
        for p in dict.fromkeys(prompts):
            self.rows.move_to_end(p)
        unique = list(dict.fromkeys(prompts))
        where = {p: i for i, p in enumerate(unique)}
        cond = concat_rows([self.rows[p] for p in unique])
        if self.device is not None:
            cond = move_to(cond, self.device)
        out = select_rows(cond, [where[p] for p in prompts])
        while self.max_entries and len(self.rows) > self.max_entries:
            self.rows.popitem(last=False)
        return out
