"""CUDA's choices pinned on fake CPU tensors (cast_core.trace_rules): what the plan would get wrong
without them — a T×T attention matrix, bf16 norm outputs, checkpointing that recomputes with other
dtypes than it saved, and reads of values fake tensors do not have."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.checkpoint import checkpoint

from cast_core.memory_trace import _fast_trackers
from cast_core.trace_rules import AnswerValueReads, cuda_choices


def _peak_activations(fn) -> int:
    PlanMemTracker, _ = _fast_trackers()
    tracker = PlanMemTracker()
    with tracker:
        fn()
    snap = next(iter(tracker.get_tracker_snapshot("peak").values()))
    return sum(v for k, v in snap.items() if getattr(k, "value", k) == "Activation")


def test_attention_never_holds_the_t_by_t_matrix():
    """4096 tokens, 8 heads: q, k, v and the output are 4 x 16 MiB; the score matrix alone would
    be 8 x 4096² x 2 B = 256 MiB. Under the pinned choices the pass holds only the former and a
    float32 log-sum-exp per query."""
    b, h, t, d = 1, 8, 4096, 128
    with FakeTensorMode(), cuda_choices() as choices:
        q, k, v = (torch.empty(b, h, t, d, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))

        def attend():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                F.scaled_dot_product_attention(q, k, v).float().sum().backward()

        peak = _peak_activations(attend)
    assert choices.attention_calls == 1
    assert peak < 8 * b * h * t * d * 2 + 64 * 2**20  # a few [b, h, t, d] tensors, never t²
    assert peak < b * h * t * t * 2


def test_norms_run_in_float32_under_autocast_as_on_cuda():
    with FakeTensorMode(), cuda_choices() as choices, torch.autocast("cpu", dtype=torch.bfloat16):
        x = torch.empty(2, 16, 32, dtype=torch.bfloat16)
        assert F.layer_norm(x, (32,)).dtype == torch.float32
        assert F.group_norm(x, 4).dtype == torch.float32
        assert (x**2).dtype == torch.float32 and x.sum().dtype == torch.float32
        assert torch.nn.Linear(32, 8)(x).dtype == torch.bfloat16  # the lower-precision list is unchanged
        assert x.sum(dtype=torch.bfloat16).dtype == torch.bfloat16  # an explicit dtype is not eligible
    assert choices.float32_casts == 4


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointing_recomputes_with_the_same_choices(reentrant):
    """Without re-entering the choices in the recomputation, the recomputed layer_norm would be
    bf16 where the forward pass saved float32: torch.utils.checkpoint refuses that (non-reentrant)
    or keeps the smaller tensors (reentrant). ``checkpoint`` was imported at module level here,
    as many models do."""
    with FakeTensorMode(), cuda_choices() as choices:
        lin = torch.nn.Linear(8, 8)
        x = torch.empty(4, 8, requires_grad=True)

        def block(t):
            return lin(torch.exp(F.layer_norm(lin(t), (8,))))

        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = checkpoint(block, x, use_reentrant=reentrant)
        y.float().sum().backward()
        assert x.grad is not None
    assert choices.float32_casts == 2  # layer_norm in the forward pass and in the recomputation (exp gets fp32)


def test_value_reads_are_answered_and_counted():
    with FakeTensorMode(), AnswerValueReads() as reads:
        mask = torch.empty(2, 3, dtype=torch.bool)
        assert bool(mask.all()) is True
        assert torch.empty(()).item() == 1.0
    assert reads.reads == 2


def test_the_choices_leave_torch_as_they_found_it():
    import torch.utils.checkpoint as ckpt

    before = (ckpt._checkpoint_without_reentrant_generator_impl, ckpt.CheckpointFunction.backward)
    with cuda_choices():
        assert ckpt._checkpoint_without_reentrant_generator_impl is not before[0]
    assert (ckpt._checkpoint_without_reentrant_generator_impl, ckpt.CheckpointFunction.backward) == before
    x = torch.ones(2, 4, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert F.layer_norm(x, (4,)).dtype == torch.bfloat16  # CPU's own rule again
