"""The tracer behind ``cast plan``: a real-size policy run on fake tensors under PyTorch's own
memory trackers, one phase at a time, with the peak of each phase by category.

Architecture-neutral: it knows a :class:`~cast_core.types.PlanSubject` (a policy built on the
meta device) and the Policy protocol, nothing about FLUX or VAEs. Three phases, each what one
process of a training step does at its most expensive moment:

* ``sample`` — one velocity batch of ``n`` images without gradients (``sample_batch_size``);
* ``decode`` — ``policy.decode`` of ``n`` latents (``decode_batch_size``);
* ``train`` — the last micro-step of a minibatch (``micro_batch_size`` samples): the velocity
  with gradients through the adapter, the SDE log-probability and the clipped objective in
  float32, ``backward``, gradient clipping and the AdamW step. Earlier micro-steps have left
  their gradients (one float32 gradient per trainable tensor; under FSDP2 a warm-up pass
  outside the tracker makes them, and they stay unsharded because those micro-steps skip the
  gradient sync), and the optimizer state exists from the steps before, as in a running job.

Everything that lives across phases is in every phase: the weights, the adapter with its
gradients' slot, AdamW's two moments and the EMA, and this process's share of the step's data
(conditioning rows, window latents, log-probs, images: "inputs").

How the trackers are used, and the care they need (found on this machine, torch 2.x, CPU):

* ``torch.distributed._tools.mem_tracker.MemTracker`` (one process) and ``fsdp2_mem_tracker.
  FSDPMemTracker`` (FSDP2 over a fake process group: ``init_process_group("fake")``; every
  collective is a no-op, each sharded tensor has the local shape of rank 0);
* MemTracker installs gradient hooks on every parameter a module uses and fails on frozen ones,
  so frozen parameters get a do-nothing handle first;
* both refuse a second top-level call of a module (they take it for a training loop's next
  iteration), but a CFG velocity calls the transformer twice on purpose: their module tracker
  keeps a sentinel parent, so every call is nested;
* both recompute per-module peaks on every operation, over every module seen (minutes for a
  32B model); only the global peak is kept here, which is what the plan reports.

Weights are bf16 (the run's ``torch_dtype``) and the adapter float32, as the policy built them on
the meta device; :func:`fake_materialize` gives each meta tensor a fake twin of the same shape,
dtype and strides. CUDA's choices that the CPU would make differently are pinned by
:mod:`cast_core.trace_rules`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from cast_core.types import PlanSubject

__all__ = [
    "CATEGORIES",
    "PHASES",
    "PhasePeak",
    "RunShape",
    "Tracer",
    "conditioning_tensors",
    "fake_materialize",
    "tensor_bytes",
]

#: the plan's categories, in print order ("gathered" only under FSDP2)
CATEGORIES = ("weights", "gathered", "adapter", "activations", "temporaries", "inputs")
PHASES = ("sample", "decode", "train")


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of a tensor on this process (a sharded tensor's local shard)."""
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


@dataclass
class PhasePeak:
    """One phase's peak: ``bytes`` by plan category at the moment the total peaked, and the
    tracker's own categories (``tracker``) for the record."""

    phase: str
    batch: int
    bytes: dict[str, int]
    tracker: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.bytes.values())


def fake_materialize(module: torch.nn.Module, device: torch.device | str) -> None:
    """Replace every parameter and buffer of ``module`` (built on the meta device) by a tensor
    of the same shape, dtype, strides and ``requires_grad`` on ``device``; call it inside a
    ``FakeTensorMode``, where the new tensors are fake and allocate nothing. Tied tensors stay
    tied. Done in place rather than with ``module.to(...)``: ``nn.Module._apply`` swaps fake
    parameters, which fails when the fake mode holds a reference to them."""
    twins: dict[int, torch.Tensor] = {}

    def twin(t: torch.Tensor, param: bool) -> torch.Tensor:
        if id(t) not in twins:
            new = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=device)
            twins[id(t)] = torch.nn.Parameter(new, requires_grad=t.requires_grad) if param else new
        return twins[id(t)]

    for sub in module.modules():
        for name, p in list(sub._parameters.items()):
            if p is not None:
                sub._parameters[name] = twin(p, True)
        for name, b in list(sub._buffers.items()):
            if b is not None:
                sub._buffers[name] = twin(b, False)
        for name, value in list(vars(sub).items()):  # plain tensor attributes (rotary tables)
            if isinstance(value, torch.Tensor) and value.device.type == "meta":
                setattr(sub, name, twin(value, False))


class _Noop:
    """A hook handle that removes nothing (MemTracker's stand-in for a frozen parameter's hook)."""

    def remove(self) -> None:
        pass


def _fast_trackers():
    """MemTracker and FSDPMemTracker with a nested module tracker and a global-peak-only update
    (module docstring), built on first use so importing this module does not import them."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed._tools.mod_tracker import ModTracker

    class NestedModTracker(ModTracker):
        SENTINEL = "<cast plan>"

        @property
        def parents(self) -> set[str]:
            return self._parents

        @parents.setter
        def parents(self, value: set[str]) -> None:
            self._parents = set(value) | {self.SENTINEL}

    class GlobalPeak:
        def _update_peak_stats(self, peak_state) -> None:
            for dev, snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < snap["Total"]:
                    self._peak_mem[dev] = snap["Total"]
                    self._peak_mem_snap[dev] = dict(snap)

    class PlanMemTracker(GlobalPeak, MemTracker):
        def __init__(self) -> None:
            super().__init__()
            self._mod_tracker = NestedModTracker()

    class PlanFSDPMemTracker(GlobalPeak, FSDPMemTracker):
        def __init__(self, mod, optm=None) -> None:
            super().__init__(mod, optm)
            self._mod_tracker = NestedModTracker()

    return PlanMemTracker, PlanFSDPMemTracker


@dataclass
class RunShape:
    """What one process of the run does, as the tracer needs it."""

    image_size: tuple[int, int]
    samples: int  # this process's share of a step's samples (what the step keeps on the device)
    window_steps: int = 2  # T: window steps trained per sample
    passes: int = 2  # forward/backward passes per minibatch (micro-batches × window steps)
    precision: str = "bf16"
    gradient_checkpointing: bool = True
    ema: bool = False
    kl: bool = False  # beta > 0: a reference velocity per pass
    keeps_x0: bool = False  # heatmaps from x̂0: one more latent per sample
    world: int = 1
    shard: bool = False  # FSDP2 over ``world`` processes


class Tracer:
    """A :class:`PlanSubject` on fake tensors, ready to trace phases. A context manager: the
    fake mode (and, for ``world > 1``, a fake process group) lives as long as it does.

    ``with Tracer(subject, shape) as t: t.trace("train", 2)``."""

    def __init__(self, subject: PlanSubject, shape: RunShape):
        self.subject, self.shape = subject, shape
        self.device = torch.device("cpu")
        self.notes: list[str] = []
        self._stack = contextlib.ExitStack()
        self.value_reads = 0
        self.float32_casts = 0
        self.attention_calls = 0

    # -- set-up -----------------------------------------------------------------------------------
    def __enter__(self) -> "Tracer":
        from torch._subclasses.fake_tensor import FakeTensorMode

        from cast_core.trace_rules import AnswerValueReads

        try:
            mesh = self._fake_group() if self.shape.shard else None
            self._stack.enter_context(FakeTensorMode())
            self._reads = self._stack.enter_context(AnswerValueReads())
            self._build(mesh)
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def _fake_group(self):
        """A fake process group of ``world`` ranks (this process is rank 0) and its mesh, made
        before the fake mode: the mesh reads real tensors."""
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.testing._internal.distributed.fake_pg import FakeStore

        if dist.is_initialized():
            raise RuntimeError(
                "cast plan traces FSDP2 over a fake process group and this process already has one; "
                "run the plan in a fresh process (cast_core.memory_plan.check_fits does)"
            )
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=self.shape.world)
        self._stack.callback(dist.destroy_process_group)
        return init_device_mesh("cpu", (self.shape.world,))

    def _build(self, mesh) -> None:
        s = self.subject
        for module in s.modules.values():
            fake_materialize(module, self.device)
        s.place(self.device)
        self.policy = s.policy
        if self.shape.gradient_checkpointing:
            self.policy.enable_gradient_checkpointing()
        self.root = None
        if mesh is not None:
            from torch.distributed.fsdp import fully_shard

            if s.shard_root is None:
                raise ValueError(f"{type(self.policy).__name__} cannot shard itself: its plan has no shard_root")
            # as cast_core.sharding.fully_shard_module: each unit, then the root, resharded after forward
            for unit in s.shard_units:
                fully_shard(unit, mesh=mesh, reshard_after_forward=True)
            fully_shard(s.shard_root, mesh=mesh, reshard_after_forward=True)
            self.root = s.shard_root
        self.params = list(self.policy.trainable_parameters())
        if not self.params:
            raise ValueError(f"{type(self.policy).__name__}'s plan has no trainable parameters")
        self.adapter_param_bytes = sum(tensor_bytes(p) for p in self.params)
        # AdamW as the trainer builds it, with CUDA's default implementation (foreach), and the
        # state of a running job: step and both moments exist before the traced step
        self.optimizer = torch.optim.AdamW(self.params, lr=1e-4, foreach=True)
        for p in self.params:
            self.optimizer.state[p] = {
                "step": torch.tensor(1.0),
                "exp_avg": torch.zeros_like(p),
                "exp_avg_sq": torch.zeros_like(p),
            }
        # AdamW keeps its step counters on the CPU (not capturable, not fused): not GPU memory
        self.step_bytes = sum(tensor_bytes(self.optimizer.state[p]["step"]) for p in self.params)
        self.ema = [torch.zeros_like(p) for p in self.params] if self.shape.ema else []
        self.inputs = self._run_state()

    def _run_state(self) -> list[torch.Tensor]:
        """This process's share of a step's data on the device, laid out as a Rollout holds it:
        conditioning rows, window latents before and after each step, per-position log-probs,
        final latents, images, advantages (and x̂0 when the heatmaps come from it)."""
        sh, n = self.shape, self.shape.samples
        latent = tuple(self.policy.initial_noise(1, sh.image_size).shape[1:])  # (N, C)
        h, w = sh.image_size
        state = [
            torch.empty(n, sh.window_steps, *latent),  # latents
            torch.empty(n, sh.window_steps, *latent),  # next_latents
            torch.empty(n, sh.window_steps, latent[0]),  # log_probs
            torch.empty(n, *latent),  # final latents
            torch.empty(n, 3, h, w),  # images, float32
            torch.empty(n, latent[0]),  # advantages
        ]
        if sh.keeps_x0:
            state.append(torch.empty(n, 1, *latent))
        cond = self.subject.conditioning(n)
        state += conditioning_tensors(cond)
        return state

    # -- tracing ----------------------------------------------------------------------------------
    def trace(self, phase: str, batch: int) -> PhasePeak:
        """The peak of ``phase`` with ``batch`` images (sample, decode) or samples (train)."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; one of {PHASES}")
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        from cast_core.trace_rules import cuda_choices

        if phase == "train" and self.shape.passes > 1:  # earlier micro-steps have left their gradients
            if self.root is None:  # unsharded: a gradient per trainable tensor, as a pass would leave it
                for p in self.params:
                    p.grad = torch.zeros_like(p)
            else:  # FSDP2 keeps them unsharded inside its parameter groups: run a pass without the sync
                with cuda_choices():
                    self._train_pass(batch, sync=False)
        tracker = self._tracker()
        reads_before = self._reads.reads
        with tracker, cuda_choices() as choices:
            if phase == "sample":
                self._sample(batch)
            elif phase == "decode":
                self._decode(batch)
            else:
                self._train_pass(batch, sync=True)
                self._optimizer_step()
        self.value_reads += self._reads.reads - reads_before
        self.float32_casts += choices.float32_casts
        self.attention_calls += choices.attention_calls
        for p in self.params:  # the next minibatch starts without gradients
            p.grad = None
        return self._peak(phase, batch, tracker)

    def _autocast(self):
        from cast_core.precision import autocast

        return autocast(self.shape.precision, self.device)

    def _sample(self, n: int) -> None:
        with torch.no_grad(), self._autocast():
            x = self.policy.initial_noise(n, self.shape.image_size)
            v = self.policy.velocity(x, 0.5, self.subject.conditioning(n), image_size=self.shape.image_size)
            if tuple(v.shape) != tuple(x.shape):
                raise ValueError(
                    f"{type(self.policy).__name__}.velocity gave {tuple(v.shape)} for latents {tuple(x.shape)}"
                )
            _ = x + (-0.1) * v.float()  # the Euler / SDE step's float32 arithmetic

    def _decode(self, n: int) -> None:
        latent = tuple(self.policy.initial_noise(1, self.shape.image_size).shape[1:])
        with torch.no_grad(), self._autocast():
            self.policy.decode(torch.empty(n, *latent), self.shape.image_size)

    def _train_pass(self, n: int, sync: bool) -> None:
        """One micro-step's forward and backward: the velocity under autocast, then the SDE
        step's Gaussian log-probability per position and the clipped objective in float32, as
        :mod:`cast_core.sde` and :mod:`cast_core.loss` compute them (their argument checks read
        tensor values, which fake tensors do not have, so the arithmetic is restated here; it
        is a few MiB next to the transformer's GiB). ``sync=False`` skips FSDP2's
        reduce-scatter, as the trainer's micro-steps before the last one do."""
        size = self.shape.image_size
        latent = tuple(self.policy.initial_noise(1, size).shape[1:])
        x, x_next = torch.empty(n, *latent), torch.empty(n, *latent)
        old, adv = torch.empty(n, latent[0]), torch.empty(n, latent[0])
        cond = self.subject.conditioning(n)
        if self.root is not None:
            self.root.set_requires_gradient_sync(sync)
        try:
            with self._autocast():
                v = self.policy.velocity(x, 0.6, cond, image_size=size)
            if self.shape.kl:
                with torch.no_grad(), self.policy.reference(), self._autocast():
                    self.policy.velocity(x, 0.6, cond, image_size=size)
            mean = x + (v.float() + 0.1 * (x + 0.4 * v.float())) * -0.1
            log_prob = -(((x_next - mean) ** 2) / 0.02).mean(-1)  # [n, N] per position
            ratio = torch.exp(log_prob - old)
            loss = -torch.minimum(ratio * adv, ratio.clamp(0.9999, 1.0001) * adv).mean()
            if not loss.requires_grad:
                raise ValueError(
                    f"{type(self.policy).__name__}.velocity does not reach its trainable parameters: "
                    "a training step would compute no gradient (does velocity() use the adapter?)"
                )
            loss.backward()
        finally:
            if self.root is not None:
                self.root.set_requires_gradient_sync(True)

    def _optimizer_step(self) -> None:
        torch.nn.utils.clip_grad_norm_(self.params, 1.0, foreach=True)
        self.optimizer.step()
        with torch.no_grad():
            for e, p in zip(self.ema, self.params):
                e.lerp_(p.detach(), 0.01)

    # -- trackers ---------------------------------------------------------------------------------
    def _tracker(self):
        PlanMemTracker, PlanFSDPMemTracker = _fast_trackers()
        if self.root is None:
            from torch.distributed._tools.mem_tracker import _MemRefType as R

            mt = PlanMemTracker()
            for module in self.subject.modules.values():
                for p in module.parameters():
                    if not p.requires_grad:  # MemTracker would hook them and fail
                        mt._param_to_grad_hook_handles[p] = (_Noop(), _Noop())
            mt.track_external(*self.subject.modules.values(), self.optimizer)
            for t in self.ema:
                mt._update_and_maybe_create_winfos(t, R.OPT)
            for t in self.inputs:
                mt._update_and_maybe_create_winfos(t, R.OTH)
            return mt
        from torch.distributed._tools.fsdp2_mem_tracker import _FSDPRefType as F

        fmt = PlanFSDPMemTracker(self.root, self.optimizer)
        return _Entered(fmt, lambda: self._register_fsdp(fmt, F))

    def _register_fsdp(self, fmt, F) -> None:
        """What FSDPMemTracker does not see by itself: modules outside the sharded root (the
        VAE) as weights, the EMA as optimizer state, the run's inputs, and gradients that
        earlier micro-steps left unsharded (FSDP2 keeps them on its unsharded parameters while
        the sync is skipped)."""
        root_params = {id(p) for p in self.root.parameters()}
        for module in self.subject.modules.values():
            if module is self.root:
                continue
            for t in [*module.parameters(), *module.buffers()]:
                if id(t) not in root_params:
                    fmt._update_and_maybe_create_winfos(t, F.BUFFER)
        for t in self.ema:
            fmt._update_and_maybe_create_winfos(t, F.OPT)
        for t in self.inputs:
            fmt._update_and_maybe_create_winfos(t, F.INP)
        for group in _fsdp_param_groups(self.root):
            for fsdp_param in group.fsdp_params:
                grad = getattr(fsdp_param, "_unsharded_param", None)
                grad = None if grad is None else grad.grad
                if grad is not None:
                    fmt._update_and_maybe_create_winfos(grad, F.UNSHARDED_GRAD)

    def _peak(self, phase: str, batch: int, tracker) -> PhasePeak:
        snap = tracker.get_tracker_snapshot("peak")
        raw: dict[str, int] = {}
        for dev_snap in snap.values():
            for key, value in dev_snap.items():
                name = getattr(key, "value", str(key))
                if name != "Total":
                    raw[name] = raw.get(name, 0) + int(value)
        get = lambda *names: sum(raw.get(n, 0) for n in names)  # noqa: E731
        if self.root is None:
            weights = get("Parameter", "Buffer") - self.adapter_param_bytes
            gathered = 0
            adapter = self.adapter_param_bytes + get("Gradient", "Optstate") - self.step_bytes
            inputs = get("Other")
        else:
            weights = get("Sharded Param", "Buffer") - self.adapter_param_bytes
            gathered = get("Unsharded Param", "All Gather")
            adapter = (
                self.adapter_param_bytes
                + get("Sharded Grad", "Unsharded Grad", "OptState", "Reduce Scatter")
                - self.step_bytes
            )
            inputs = get("Inputs")
        by = {
            "weights": weights,
            "gathered": gathered,
            "adapter": adapter,
            "activations": get("Activation"),
            "temporaries": get("Temp"),
            "inputs": inputs,
        }
        return PhasePeak(phase, batch, by, raw)


class _Entered:
    """A context manager that enters ``tracker`` and then runs ``after`` (registrations that
    need the tracker's snapshots to exist)."""

    def __init__(self, tracker, after) -> None:
        self.tracker, self.after = tracker, after

    def __enter__(self):
        self.tracker.__enter__()
        self.after()
        return self.tracker

    def __exit__(self, *exc) -> None:
        self.tracker.__exit__(*exc)

    def get_tracker_snapshot(self, kind: str = "current"):
        return self.tracker.get_tracker_snapshot(kind)


def _fsdp_param_groups(root: torch.nn.Module) -> Iterator[Any]:
    from torch.distributed.fsdp import FSDPModule

    for module in root.modules():
        if isinstance(module, FSDPModule):
            group = module._get_fsdp_state()._fsdp_param_group
            if group is not None:
                yield group


def conditioning_tensors(cond: Any) -> list[torch.Tensor]:
    """The tensors of a conditioning (a tensor, or a dataclass of tensors such as PromptEmbeds)."""
    if isinstance(cond, torch.Tensor):
        return [cond]
    if hasattr(cond, "__dataclass_fields__"):
        out = []
        for name in cond.__dataclass_fields__:
            value = getattr(cond, name)
            if isinstance(value, torch.Tensor):
                out.append(value)
            elif isinstance(value, dict):
                out += [v for v in value.values() if isinstance(v, torch.Tensor)]
        return out
    return []
