"""CUDA's choices, pinned while a memory plan is traced on fake CPU tensors.

Why this exists: ``cast plan`` runs a real-size model under ``FakeTensorMode`` (shapes and dtypes,
no memory). Fake *CUDA* tensors run a forward pass but ``backward()`` needs a CUDA driver, so the
plan traces fake *CPU* tensors — and the CPU makes other choices than the GPU it plans for. Three
of them change the bytes a step holds, and this module makes them CUDA's:

* **attention**: ``F.scaled_dot_product_attention`` runs as one fused kernel that keeps the
  output and a float32 log-sum-exp per query, never the ``T×T`` score matrix (CUDA's flash and
  memory-efficient kernels). The plan calls ``aten._scaled_dot_product_flash_attention_for_cpu``,
  whose output and saved tensors have exactly those shapes, instead of letting the dispatcher pick
  (its math fallback would materialise ``T×T``: 4608² × 48 heads × 2 B = 1.9 GiB per FLUX.2 layer
  at 1024²);
* **autocast's float32 list**: under CUDA autocast ``layer_norm``, ``group_norm``, ``softmax``,
  ``exp``, ``pow``, ``rsqrt``, ``sum`` … run in float32 and return float32 (PyTorch's AMP
  reference, "CUDA Ops that can autocast to float32"); CPU autocast leaves them in bfloat16. A
  FLUX.2 block's norm outputs and the VAE decoder's group-norm outputs are twice as large on the
  GPU, so :class:`CudaChoices` casts those ops' bf16/fp16 inputs to float32 first (recorded by
  autograd, as CUDA's autocast cast is). The lower-precision list (``linear``, ``matmul``,
  ``conv``, ``bmm``, ``baddbmm``, SDPA) is the same on both devices and left to CPU autocast;
* **value reads**: a fake tensor has no values, so ``bool(mask.all())`` or ``.item()`` cannot be
  answered. :class:`AnswerValueReads` answers every such read with ``True`` / ``1`` and counts
  them; a plannable policy must not branch on tensor values in a way that changes its memory
  (Qwen-Image asks whether its text mask is all ones; the plan's conditioning has no padding, so
  True is the right answer).

The optimizer's CUDA choice (``foreach`` AdamW, the default for CUDA tensors, which holds one
temporary the size of the adapter during ``step()``) is the tracer's: it builds ``AdamW(...,
foreach=True)`` and clips with ``foreach=True``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

__all__ = ["CudaChoices", "AnswerValueReads", "cuda_choices", "flash_attention", "CUDA_FLOAT32_OPS"]

_T = torch.Tensor
#: the ops of CUDA autocast's float32 list that these models call (PyTorch's AMP op reference)
CUDA_FLOAT32_OPS = frozenset(
    {
        F.layer_norm,
        F.group_norm,
        F.softmax,
        F.log_softmax,
        F.softmin,
        F.softplus,
        F.normalize,
        F.cosine_similarity,
        F.mse_loss,
        F.l1_loss,
        F.smooth_l1_loss,
        F.nll_loss,
        F.cross_entropy,
        F.kl_div,
        torch.exp,
        _T.exp,
        torch.expm1,
        _T.expm1,
        torch.log,
        _T.log,
        torch.log1p,
        _T.log1p,
        torch.log2,
        _T.log2,
        torch.log10,
        _T.log10,
        torch.pow,
        _T.pow,
        _T.__pow__,
        _T.__rpow__,
        _T.__rtruediv__,
        torch.rsqrt,
        _T.rsqrt,
        torch.reciprocal,
        _T.reciprocal,
        torch.norm,
        _T.norm,
        torch.cumsum,
        _T.cumsum,
        torch.cumprod,
        _T.cumprod,
        torch.prod,
        _T.prod,
        torch.sum,
        _T.sum,
        torch.logsumexp,
        _T.logsumexp,
        torch.acos,
        torch.asin,
        torch.cosh,
        torch.sinh,
        torch.tan,
        torch.erfinv,
        torch.cdist,
    }
)
_LOW = (torch.bfloat16, torch.float16)


def _low_precision(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype in _LOW


def flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` as a fused kernel: the output and a float32
    log-sum-exp per query are all it allocates (and all its backward keeps), as CUDA's flash and
    memory-efficient kernels. Inputs are cast to autocast's dtype as the real call's autocast
    would."""
    if torch.is_autocast_enabled("cpu"):
        dtype = torch.get_autocast_dtype("cpu")
    else:
        dtype = torch.promote_types(torch.promote_types(query.dtype, key.dtype), value.dtype)
    q, k, v = (t.to(dtype) for t in (query, key, value))
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        groups = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(groups, dim=-3), v.repeat_interleave(groups, dim=-3)
    out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, float(dropout_p), bool(is_causal), attn_mask=attn_mask, scale=scale
    )
    return out


def _backward(tensor, gradient=None, retain_graph=None, create_graph=False, inputs=None) -> None:
    torch.autograd.backward(tensor, gradient, retain_graph, create_graph, inputs=inputs)


class CudaChoices(TorchFunctionMode):
    """Attention as a fused kernel and CUDA autocast's float32 ops (module docstring). Counts
    what it changed, for the plan's notes (into ``counts``, another instance, when given: the
    copy that activation checkpointing's recomputation enters counts into the original)."""

    def __init__(self, counts: "CudaChoices | None" = None) -> None:
        super().__init__()
        self.counts = counts or self
        self.attention_calls = 0
        self.float32_casts = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.backward:
            # straight to the engine: a tensor subclass's own handler (a fake tensor's) would run
            # the backward pass with function modes switched off, and checkpointing's
            # recomputation could then not enter these choices again
            return _backward(*args, **kwargs)
        if func is F.scaled_dot_product_attention:
            self.counts.attention_calls += 1
            return flash_attention(*args, **kwargs)
        if (
            func in CUDA_FLOAT32_OPS
            and "dtype" not in kwargs  # an explicit dtype= is not eligible for autocast
            and torch.is_autocast_enabled("cpu")
            and any(_low_precision(a) for a in tree_flatten((args, kwargs))[0])
        ):
            self.counts.float32_casts += 1
            args, kwargs = tree_map(lambda a: a.float() if _low_precision(a) else a, (args, kwargs))
            with torch.autocast("cpu", enabled=False):
                return func(*args, **kwargs)
        return func(*args, **kwargs)


class AnswerValueReads(TorchDispatchMode):
    """Answers a read of a fake tensor's value (``item()``, ``bool()``, ``tolist()``) with
    ``True`` / ``1`` and counts the reads (module docstring). Enter it *inside* the
    ``FakeTensorMode``, so that it sees each read before the fake mode refuses it."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.reads += 1
            t = args[0]
            return True if t.dtype == torch.bool else (1.0 if t.is_floating_point() else 1)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def cuda_choices() -> Iterator[CudaChoices]:
    """:class:`CudaChoices` for the duration of the block (yields the mode, for its counts).

    The autograd engine does not carry function modes into the backward pass, where activation
    checkpointing recomputes its blocks: the recomputation would run CPU's choices and produce
    tensors of other dtypes than the forward pass saved (torch refuses that, or for a reentrant
    checkpoint silently keeps the smaller ones). So for the block, torch.utils.checkpoint's two
    recomputation paths enter the same choices: the non-reentrant one through a recomputation
    context (composed with the caller's own ``context_fn``), the reentrant one around
    ``CheckpointFunction.backward``. Both are patched where ``checkpoint`` looks them up at call
    time, so a model that imported ``checkpoint`` at module level is covered too."""
    import torch.utils.checkpoint as ckpt

    mode = CudaChoices()

    @contextlib.contextmanager
    def recompute(inner):
        with inner, CudaChoices(counts=mode):
            yield

    def with_choices(context_fn):
        def contexts():
            forward_ctx, recompute_ctx = context_fn()
            return forward_ctx, recompute(recompute_ctx)

        return contexts

    name = next(
        n
        for n in ("_checkpoint_without_reentrant_generator_impl", "_checkpoint_without_reentrant_generator")
        if hasattr(ckpt, n)
    )
    generator = getattr(ckpt, name)

    def patched_generator(fn, *args, **kwargs):
        if "context_fn" in kwargs:
            kwargs["context_fn"] = with_choices(kwargs["context_fn"])
        elif name == "_checkpoint_without_reentrant_generator" and len(args) >= 2:  # (preserve, context_fn, ...)
            args = (args[0], with_choices(args[1]), *args[2:])
        else:
            kwargs["context_fn"] = with_choices(ckpt.noop_context_fn)
        return generator(fn, *args, **kwargs)

    reentrant_backward = ckpt.CheckpointFunction.backward

    def patched_backward(ctx, *grads):
        with CudaChoices(counts=mode):
            return reentrant_backward(ctx, *grads)

    setattr(ckpt, name, patched_generator)
    ckpt.CheckpointFunction.backward = staticmethod(patched_backward)
    try:
        with mode:
            yield mode
    finally:
        setattr(ckpt, name, generator)
        ckpt.CheckpointFunction.backward = staticmethod(reentrant_backward)
