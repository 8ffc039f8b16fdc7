"""The tracer behind ``cast plan`` (cast_core.memory_trace) against bytes counted by hand, on a toy
policy small enough to count: a frozen up-projection, ``exp``, and a frozen down-projection with a
rank-r LoRA. If the tracer stops seeing a category (frozen weights, the adapter's gradients, Adam's
moments, an activation, the run's inputs) these tests fail."""

from __future__ import annotations

import contextlib

import pytest
import torch

from cast_core.memory_trace import RunShape, Tracer, fake_materialize
from cast_core.types import PlanSubject

C, H, R, N = 8, 4096, 4, 64  # latent channels, hidden width, LoRA rank, latent positions
F32, BF16 = 4, 2


class _Field(torch.nn.Module):
    def __init__(self, base_dtype: torch.dtype, rank: int):
        super().__init__()
        self.up = torch.nn.Linear(C, H, bias=False, dtype=base_dtype).requires_grad_(False)
        self.down = torch.nn.Linear(H, C, bias=False, dtype=base_dtype).requires_grad_(False)
        self.lora_A = torch.nn.Linear(H, rank, bias=False)
        self.lora_B = torch.nn.Linear(rank, C, bias=False)

    def forward(self, x, cond):
        h = torch.exp(self.up(x.to(self.up.weight.dtype)))  # [n, N, H]: exp keeps its output for backward
        return (self.down(h) + self.lora_B(self.lora_A(h.float())).to(h.dtype)).float() + cond[:, None, :]


class ToyPolicy:
    """The Policy members the tracer calls, around :class:`_Field`."""

    default_image_size = (16, 16)

    def __init__(self, base_dtype=torch.float32, rank=R):
        self.field = _Field(base_dtype, rank)
        self.device = torch.device("cpu")

    def initial_noise(self, n, image_size=None, generator=None):
        return torch.zeros(n, N, C, device=self.device)

    def velocity(self, latents, sigma, cond, image_size=None):
        return self.field(latents, cond)

    def decode(self, latents, image_size=None):
        return latents.reshape(latents.shape[0], 2, 16, 16).float()

    def trainable_parameters(self):
        return [self.field.lora_A.weight, self.field.lora_B.weight]

    def enable_gradient_checkpointing(self):
        pass

    @contextlib.contextmanager
    def reference(self):
        yield


def toy_subject(base_dtype=torch.float32, rank=R) -> PlanSubject:
    with torch.device("meta"):
        policy = ToyPolicy(base_dtype, rank)
    return PlanSubject(
        policy=policy,
        modules={"field": policy.field},
        conditioning=lambda n: torch.zeros(n, C),
        place=lambda device: setattr(policy, "device", torch.device(device)),
        architecture="toy",
    )


WEIGHTS = 2 * C * H  # elements of up and down
ADAPTER = R * H + C * R  # elements of lora_A and lora_B


def inputs_bytes(samples: int, window_steps: int) -> int:
    """What RunShape keeps per process, counted by hand: latents and next latents [S, T, N, C],
    log-probs [S, T, N], final latents [S, N, C], images [S, 3, 16, 16], advantages [S, N] (all
    float32) and the conditioning rows [S, C]."""
    per = 2 * window_steps * N * C + window_steps * N + N * C + 3 * 16 * 16 + N + C
    return samples * per * F32


def shape(**kw) -> RunShape:
    defaults = dict(
        image_size=(16, 16), samples=4, window_steps=2, passes=1, precision="no", gradient_checkpointing=False
    )
    return RunShape(**{**defaults, **kw})


def test_static_bytes_are_the_hand_count():
    """Weights, the adapter with AdamW's two moments, and the run's inputs: exact."""
    with Tracer(toy_subject(), shape()) as t:
        peak = t.trace("decode", 1)
    assert peak.bytes["weights"] == WEIGHTS * F32
    assert peak.bytes["adapter"] == 3 * ADAPTER * F32  # parameters, exp_avg, exp_avg_sq
    assert peak.bytes["inputs"] == inputs_bytes(4, 2)
    assert peak.bytes["gathered"] == 0


def test_bf16_weights_count_two_bytes_and_the_adapter_four():
    with Tracer(toy_subject(torch.bfloat16), shape(precision="bf16")) as t:
        peak = t.trace("decode", 1)
    assert peak.bytes["weights"] == WEIGHTS * BF16
    assert peak.bytes["adapter"] == 3 * ADAPTER * F32


def test_sampling_activations_are_the_hand_count():
    """No gradients: the peak is inside ``exp``, where its input and output ``[n, N, H]`` both
    live, beside the noise ``[n, N, C]`` and the conditioning rows ``[n, C]``."""
    n = 3
    with Tracer(toy_subject(), shape()) as t:
        peak = t.trace("sample", n)
    assert peak.bytes["activations"] == (2 * n * N * H + n * N * C + n * C) * F32
    assert peak.bytes["temporaries"] == 0


def test_training_step_bytes_are_the_hand_count():
    """The first micro-step of a minibatch peaks inside ``exp`` too (before any gradient exists):
    the adapter is parameters and AdamW's moments, the activations ``exp``'s input and output
    plus the step's latents before and after ``[n, N, C]``, its old log-probs and advantages
    ``[n, N]`` and its conditioning rows."""
    n = 3
    with Tracer(toy_subject(), shape()) as t:
        peak = t.trace("train", n)
    assert peak.bytes["adapter"] == 3 * ADAPTER * F32
    assert peak.bytes["activations"] == (2 * n * N * H + 2 * n * N * C + 2 * n * N + n * C) * F32


def test_earlier_micro_steps_leave_their_gradients():
    """With several passes per minibatch the traced step is the last one: the gradients of the
    earlier ones are there before it starts."""
    with Tracer(toy_subject(), shape(passes=2)) as t:
        peak = t.trace("train", 1)
    assert peak.bytes["adapter"] == 4 * ADAPTER * F32
    assert peak.bytes["activations"] == (2 * N * H + 2 * N * C + 2 * N + C) * F32


def test_the_optimizer_step_holds_one_foreach_temporary():
    """A large adapter and a small batch: the step's peak is AdamW's (foreach, as on CUDA):
    parameters, gradients, both moments and the one temporary ``sqrt(v)`` — five adapters."""
    rank = 1024
    adapter = rank * H + C * rank
    with Tracer(toy_subject(rank=rank), shape()) as t:
        peak = t.trace("train", 1)
    assert peak.bytes["adapter"] == 5 * adapter * F32


def test_the_ema_is_adapter_state():
    with Tracer(toy_subject(), shape(ema=True)) as t:
        peak = t.trace("decode", 1)
    assert peak.bytes["adapter"] == 4 * ADAPTER * F32


def test_activations_grow_linearly_with_the_batch():
    """What the plan's extrapolation rests on: the peak at 1, 2 and 3 lies on one line."""
    with Tracer(toy_subject(), shape()) as t:
        totals = [t.trace("train", n).total for n in (1, 2, 3)]
    assert totals[2] - totals[1] == totals[1] - totals[0] > 0


def test_fake_materialize_keeps_shapes_dtypes_ties_and_requires_grad():
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with torch.device("meta"):
        m = torch.nn.Sequential(torch.nn.Linear(4, 4, dtype=torch.bfloat16), torch.nn.Linear(4, 4))
        m[1].weight = m[0].weight  # tied
        m.register_buffer("table", torch.empty(3, 2, dtype=torch.complex64))
        m[0].bias.requires_grad_(False)
    with FakeTensorMode():
        fake_materialize(m, "cpu")
        assert all(isinstance(p, FakeTensor) and p.device.type == "cpu" for p in m.parameters())
        assert m[1].weight is m[0].weight and m[0].weight.dtype == torch.bfloat16
        assert not m[0].bias.requires_grad and m[1].bias.requires_grad
        assert m.table.dtype == torch.complex64 and m.table.device.type == "cpu"


def test_unknown_phases_and_batches_are_refused():
    with Tracer(toy_subject(), shape()) as t:
        with pytest.raises(ValueError, match="unknown phase"):
            t.trace("encode", 1)
        with pytest.raises(ValueError, match="batch must be >= 1"):
            t.trace("train", 0)
