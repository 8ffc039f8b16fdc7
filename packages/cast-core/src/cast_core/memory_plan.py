"""``cast plan``: the GPU memory of a training configuration, traced before launch.

From a built :class:`~cast_core.config.TrainConfig` (recipe, ``--set``, file), the policy's
:class:`~cast_core.protocols.Plannable` feature builds the model at real size without weights,
and :mod:`cast_core.memory_trace` runs one sampling batch, one decode and one training micro-step
of one process on fake tensors. Each phase is traced at batch 1 and at the configured size (2
when that is 1): the configured peak is a trace. The largest batch sizes that fit are searched
with a few more traces (:func:`cast_core.plan_budget.largest_that_fits`: the peak is convex in the
batch, so a line through two traces bounds it from one side and a trace confirms the answer).

What the plan reads from the config: ``policy_kwargs`` (LoRA rank / alpha / targets,
``image_size``, guidance …), ``base_dtype``, ``precision``, ``gradient_checkpointing``,
``sharding`` (``auto``: FSDP2 on several GPUs when the policy shards itself), the three batch
sizes, ``prompts_per_step × group_size`` (this process's share of a step), the window's size,
``minibatch_size``, ``ema``, ``beta`` and ``heatmap_source``.

:func:`check_fits` is the trainer's start-up check: it raises a one-line
:class:`~cast_core.errors.ConfigError` naming the setting to change. Traces are cached on disk
by everything they depend on (``$CAST_CACHE_DIR/plans`` or ``~/.cache/cast/plans``), so a run
that starts again reads its plan in seconds (the model is still built on the meta device).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cast_core.errors import ConfigError
from cast_core.plan_budget import CUDA_ALLOWANCE, format_gib, host_ram, largest_that_fits, parse_memory

__all__ = ["MemoryPlan", "plan_memory", "check_fits", "refuse_if_unfit", "plannable_factory", "PLAN_VERSION"]

#: bump when the tracer's method changes, so cached traces are not reused across methods
PLAN_VERSION = 1
BATCH_SETTINGS = {"sample": "sample_batch_size", "decode": "decode_batch_size", "train": "micro_batch_size"}


@dataclass
class MemoryPlan:
    """A configuration's plan: per-phase peaks (bytes by category) at the configured sizes, the
    overall peak, whether it fits ``gpu_memory`` with :data:`CUDA_ALLOWANCE`, the largest batch
    sizes that fit, the start-up and host-RAM lines, and how it was obtained."""

    recipe: str | None
    policy: str
    architecture: str
    gpus: int
    gpu_memory: int
    image_size: list[int]
    settings: dict[str, Any]
    phases: dict[str, dict[str, Any]]
    peak: dict[str, Any]
    cuda_allowance: int
    fits: bool
    largest: dict[str, int]
    largest_exact: dict[str, bool]
    startup: dict[str, Any]
    host_ram: dict[str, Any]
    method: list[str]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def advice(self) -> str | None:
        """One line naming the setting to change when the plan does not fit, else None."""
        if self.fits:
            return None
        need = self.peak["total"] + self.cuda_allowance
        head = (
            f"the run needs {format_gib(need)} per GPU at its peak ({self.peak['phase']}, "
            f"{self.gpus} GPU(s), {self.image_size[0]}x{self.image_size[1]}) "
            f"and the GPU has {format_gib(self.gpu_memory)}"
        )
        over = [
            p for p in ("train", "sample", "decode") if self.phases[p]["total"] + self.cuda_allowance > self.gpu_memory
        ]
        for phase in over:
            key, largest = BATCH_SETTINGS[phase], self.largest[BATCH_SETTINGS[phase]]
            if largest >= 1:
                return f"{head}: set {key} = {largest} (the largest that fits; now {self.settings[key]})"
        s = self.settings
        if "train" in over and not s["gradient_checkpointing"]:
            return f"{head}, even at micro_batch_size = 1: set gradient_checkpointing = true"
        if s["base_dtype"] == "float32":
            return f'{head}, even at batch size 1: set base_dtype = "bfloat16" (and precision = "bf16")'
        if s["sharding"] != "fsdp2":
            return f'{head}, even at batch size 1: shard the weights over more GPUs (sharding = "fsdp2", --gpus N)'
        return f"{head}, even at batch size 1: use more GPUs (each holds 1/N of the weights) or a smaller image_size"


# -- the policy's feature -----------------------------------------------------------------------
def plannable_factory(policy: str) -> Any:
    """The registered factory of ``policy`` (a lazy one resolved) when it has ``build_for_plan``;
    a ConfigError naming the feature otherwise."""
    from cast_core.registry import lookup

    factory = lookup("policy", policy).factory
    target = factory.resolve() if hasattr(factory, "resolve") else factory
    if not callable(getattr(target, "build_for_plan", None)):
        raise ConfigError(
            f"policy {policy!r} cannot be planned: its factory has no build_for_plan (the Plannable feature, "
            "docs/plugins.md#optional-features); its memory can only be measured on the GPU"
        )
    return target


def _policy_kwargs(cfg, image_size: list[int] | None) -> dict[str, Any]:
    kwargs = dict(cfg.policy_kwargs)
    kwargs["torch_dtype"] = cfg.base_dtype  # as the trainer passes it (float32 when unset)
    if image_size is not None:
        kwargs["image_size"] = list(image_size)
    return kwargs


def _window_steps(cfg) -> int:
    if cfg.window is None:
        return int(cfg.window_size)
    kw = cfg.window_kwargs or {}
    return int(kw.get("window_size") or kw.get("size") or cfg.window_size)


@dataclass
class _Shape:
    """The run as one process sees it."""

    gpus: int
    samples: int  # this process's share of a step
    minibatch: int  # this process's share of a minibatch
    sample_batch: int
    decode_batch: int
    micro_batch: int
    window_steps: int
    passes: int
    sharding: str  # resolved: fsdp2, ddp, single


def _shape(cfg, gpus: int, self_shards: bool) -> _Shape:
    total = cfg.prompts_per_step * cfg.group_size
    if total % gpus:
        raise ConfigError(
            f"prompts_per_step x group_size = {total} samples do not divide over {gpus} GPUs; "
            "change prompts_per_step or group_size"
        )
    samples = total // gpus
    minibatch = math.ceil((cfg.minibatch_size or total) / gpus)
    sample_batch = min(cfg.sample_batch_size or samples, samples)
    decode_batch = min(cfg.decode_batch_size or sample_batch, sample_batch)
    micro = min(cfg.micro_batch_size or minibatch, minibatch)
    steps = _window_steps(cfg)
    if cfg.sharding == "fsdp2" or (cfg.sharding == "auto" and gpus > 1 and self_shards):
        if not self_shards:
            raise ConfigError(
                f"config key 'sharding': policy {cfg.policy!r} cannot shard itself; use sharding = \"accelerate\""
            )
        sharding = "fsdp2" if gpus > 1 else "single"
    else:
        sharding = "ddp" if gpus > 1 else "single"
    return _Shape(
        gpus,
        samples,
        minibatch,
        sample_batch,
        decode_batch,
        micro,
        steps,
        math.ceil(minibatch / micro) * steps,
        sharding,
    )


def _loads_sharded(cfg, shape: _Shape) -> bool:
    """Whether each process reads only its slice of the weights, as the trainer decides it: several
    processes under fsdp2 / auto with a policy that takes ``load_sharded`` (default on there)."""
    from cast_core.registry import factory_takes

    return (
        shape.sharding == "fsdp2"
        and cfg.sharding in ("fsdp2", "auto")
        and factory_takes("policy", cfg.policy, "load_sharded")
        and bool(cfg.policy_kwargs.get("load_sharded", True))
    )


# -- traces (cached) ---------------------------------------------------------------------------------
def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"plan": str(PLAN_VERSION)}
    for dist in ("torch", "diffusers", "peft", "cast-core"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    return out


def _cache_dir() -> Path:
    root = os.environ.get("CAST_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "cast") / "plans"


def _trace_key(cfg, policy_kwargs: dict, architecture: str | None, shape: _Shape, image_size) -> dict[str, Any]:
    ignored = {"path", "device", "text_encoder_device", "compile", "attention_backend", "load_sharded"}
    return {
        "policy": cfg.policy,
        "architecture": architecture
        or (policy_kwargs.get("path") if Path(str(policy_kwargs.get("path", ""))).expanduser().is_dir() else None),
        "policy_kwargs": {k: v for k, v in sorted(policy_kwargs.items()) if k not in ignored},
        "image_size": image_size,
        "shape": asdict(shape),
        "precision": cfg.precision,
        "gradient_checkpointing": cfg.gradient_checkpointing,
        "ema": cfg.ema > 0,
        "kl": cfg.beta > 0,
        "x0": cfg.heatmap_source == "x0",
        "versions": _versions(),
    }


def _run_shape(cfg, shape: _Shape, image_size):
    from cast_core.memory_trace import RunShape

    return RunShape(
        image_size=tuple(image_size),
        samples=shape.samples,
        window_steps=shape.window_steps,
        passes=shape.passes,
        precision=cfg.precision,
        gradient_checkpointing=cfg.gradient_checkpointing,
        ema=cfg.ema > 0,
        kl=cfg.beta > 0,
        keeps_x0=cfg.heatmap_source == "x0",
        world=shape.gpus,
        shard=shape.sharding == "fsdp2",
    )


class _Traces:
    """Traced peaks by phase and batch size: read from the cache, traced on demand. The model goes
    onto fake tensors (and a fake process group) the first time a point is missing, once."""

    def __init__(self, subject, run, data: dict | None):
        from cast_core.memory_trace import tensor_bytes

        self.subject, self.run = subject, run
        self.data = data or {"phases": {}, "counts": {"value_reads": 0, "float32_casts": 0, "attention_calls": 0}}
        trainable = list(subject.policy.trainable_parameters())
        ids = {id(p) for p in trainable}
        self.data["module_bytes"] = {
            name: sum(tensor_bytes(t) for t in [*m.parameters(), *m.buffers()] if id(t) not in ids)
            for name, m in subject.modules.items()
        }
        self.data["adapter_parameters"] = sum(p.numel() for p in trainable)
        self.data["adapter_param_bytes"] = sum(tensor_bytes(p) for p in trainable)
        self.new = False
        self._stack = contextlib.ExitStack()
        self._tracer = None

    def point(self, phase: str, n: int) -> dict[str, Any]:
        points = self.data["phases"].setdefault(phase, {})
        if str(n) not in points:
            from cast_core.memory_trace import Tracer

            if self._tracer is None:
                self._tracer = self._stack.enter_context(Tracer(self.subject, self.run))
            peak = self._tracer.trace(phase, n)
            points[str(n)] = {"bytes": peak.bytes, "tracker": peak.tracker, "total": peak.total}
            self.new = True
        return points[str(n)]

    def close(self) -> None:
        if self._tracer is not None:
            counts = self.data["counts"]
            for key in counts:
                counts[key] += getattr(self._tracer, key)
        self._stack.close()


def _cache_path(cfg, policy_kwargs, architecture, shape, image_size) -> tuple[Path, dict]:
    key = _trace_key(cfg, policy_kwargs, architecture, shape, image_size)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]
    return _cache_dir() / f"{digest}.json", key


def _read_cache(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))["trace"]
    except (OSError, ValueError, KeyError):
        return None  # absent or damaged: traced again


def _write_cache(path: Path, key: dict, trace: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "trace": trace}, default=str), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: plan without a cache


# -- the plan --------------------------------------------------------------------------------------
def _prompt_rows_bytes(cfg, subject) -> int | None:
    """Host RAM of the prompt cache: every training prompt's conditioning row, when the prompts
    can be listed without running code the user did not ask for (a recipe's own spec is fine)."""
    from cast_core.memory_trace import tensor_bytes
    from cast_core.prompts import is_code_spec, resolve_prompts

    spec = cfg.prompts
    if is_code_spec(spec):
        from cast_core.registry import get_recipe

        if cfg.recipe is None or get_recipe(cfg.recipe).settings.get("prompts") != spec:
            return None
    try:
        count = len(resolve_prompts(spec))
    except Exception:  # noqa: BLE001 - a prompt list that cannot be read only loses this line
        return None
    from torch._subclasses.fake_tensor import FakeTensorMode

    from cast_core.memory_trace import conditioning_tensors

    with FakeTensorMode():
        row = sum(tensor_bytes(t) for t in conditioning_tensors(subject.conditioning(1)))
    return count * row


def plan_memory(
    cfg,
    *,
    gpus: int = 1,
    gpu_memory: int | str = "80GiB",
    image_size: int | list[int] | None = None,
    architecture: str | None = None,
    use_cache: bool = True,
) -> MemoryPlan:
    """The plan of ``cfg`` on ``gpus`` GPUs of ``gpu_memory`` (bytes or ``"80GiB"``), at
    ``image_size`` (a side or ``[h, w]``; default: the config's, else the policy's)."""
    import torch

    from cast_core.protocols import self_shards
    from cast_core.registry import check_factory_kwargs

    started = time.perf_counter()
    if gpus < 1:
        raise ConfigError(f"--gpus {gpus}: plan for at least one GPU")
    memory = parse_memory(gpu_memory)
    size = [int(image_size)] * 2 if isinstance(image_size, int) else (list(image_size) if image_size else None)
    size = size or (list(cfg.image_size) if cfg.image_size else None)
    factory = plannable_factory(cfg.policy)
    check_factory_kwargs("policy", cfg.policy, cfg.policy_kwargs, "policy_kwargs")
    policy_kwargs = _policy_kwargs(cfg, size)
    try:
        subject = factory.build_for_plan(architecture, **policy_kwargs)
    except (ValueError, TypeError) as err:
        raise ConfigError(
            f"cast plan: policy {cfg.policy!r} cannot build {architecture or 'its default'}: {err}"
        ) from None
    size = list(size or subject.policy.default_image_size)
    shape = _shape(cfg, gpus, self_shards(subject.policy))
    path, key = _cache_path(cfg, policy_kwargs, architecture, shape, size)
    traces = _Traces(subject, _run_shape(cfg, shape, size), _read_cache(path) if use_cache else None)
    configured = {"sample": shape.sample_batch, "decode": shape.decode_batch, "train": shape.micro_batch}
    caps = {"sample": shape.samples, "decode": shape.samples, "train": shape.minibatch}
    budget = memory - CUDA_ALLOWANCE
    ddp_buckets = traces.data["adapter_param_bytes"] if shape.sharding == "ddp" else 0
    phases, largest, exact = {}, {}, {}
    try:
        for phase, n in configured.items():
            at = dict(traces.point(phase, n)["bytes"])
            at["adapter"] += ddp_buckets
            second = n if n > 1 else 2
            one, two = traces.point(phase, 1)["total"], traces.point(phase, second)["total"]
            largest[BATCH_SETTINGS[phase]], exact[BATCH_SETTINGS[phase]] = largest_that_fits(
                lambda m, phase=phase: traces.point(phase, m)["total"] + ddp_buckets, budget, caps[phase]
            )
            phases[phase] = {
                "batch": n,
                "bytes": at,
                "total": sum(at.values()),
                "at_1": one + ddp_buckets,
                "per_item": int(max(0, two - one) / (second - 1)),
                "traced": {
                    int(b): v["total"] + ddp_buckets
                    for b, v in sorted(traces.data["phases"][phase].items(), key=lambda kv: int(kv[0]))
                },
                "tracker": traces.point(phase, n)["tracker"],
            }
    finally:
        traces.close()
    cached = not traces.new
    if use_cache and traces.new:
        _write_cache(path, key, traces.data)
    trace = traces.data
    capped = [BATCH_SETTINGS[p] for p in configured if largest[BATCH_SETTINGS[p]] == caps[p] and caps[p] > 0]
    top = max(phases, key=lambda p: phases[p]["total"])
    peak = {"phase": top, "bytes": phases[top]["bytes"], "total": phases[top]["total"]}
    fits = peak["total"] + CUDA_ALLOWANCE <= memory

    text = subject.text_encoder or {}
    encoder_bytes = int(text.get("bytes", 0))
    encoder_device = str(cfg.policy_kwargs.get("text_encoder_device", cfg.policy_kwargs.get("device", "cpu")))
    startup = {
        "text_encoder": text.get("name"),
        "text_encoder_bytes": encoder_bytes,
        "on_gpu": encoder_device.startswith("cuda"),
        "fits": (not encoder_device.startswith("cuda")) or encoder_bytes + CUDA_ALLOWANCE <= memory,
        "note": "arithmetic: the encoder's weights while it encodes the training prompts, before the transformer "
        "arrives (offload_text_encoder); the encoding batch's hidden states come on top",
    }
    modules = trace["module_bytes"]
    ram = host_ram(
        transformer_bytes=sum(v for k, v in modules.items() if k != "vae"),
        vae_bytes=modules.get("vae", 0),
        text_encoder_bytes=encoder_bytes,
        processes=min(gpus, 8),
        sharded_load=_loads_sharded(cfg, shape),
        encoder_on_gpu=startup["on_gpu"],
        offload_text_encoder=cfg.offload_text_encoder,
        prompt_rows_bytes=_prompt_rows_bytes(cfg, subject),
    )
    lora = getattr(subject.policy, "lora", {}) or {}
    settings = {
        "micro_batch_size": shape.micro_batch,
        "sample_batch_size": shape.sample_batch,
        "decode_batch_size": shape.decode_batch,
        "samples_per_gpu": shape.samples,
        "window_steps": shape.window_steps,
        "passes_per_minibatch": shape.passes,
        "sharding": shape.sharding,
        "base_dtype": cfg.base_dtype,
        "precision": cfg.precision,
        "gradient_checkpointing": cfg.gradient_checkpointing,
        "lora_rank": lora.get("rank"),
        "lora_targets": lora.get("targets"),
        "adapter_parameters": trace["adapter_parameters"],
        "ema": cfg.ema > 0,
        "kl": cfg.beta > 0,
    }
    method = [
        f"traced: torch {torch.__version__} MemTracker"
        + (f" / FSDPMemTracker over a fake process group of {gpus}" if shape.sharding == "fsdp2" else "")
        + " on fake CPU tensors (FakeTensorMode), rank 0's view",
        "each phase traced at batch 1 and at its configured size (2 when that is 1); the largest sizes searched "
        "with more traces (the peak is convex in the batch: extrapolated along the line through the two largest "
        "traces, then confirmed by a trace at the candidate; 'phases.*.traced' lists every size traced)",
        "CUDA's choices pinned (cast_core.trace_rules): fused attention without the TxT matrix, autocast's float32 "
        f"ops ({trace['counts']['float32_casts']} casts), foreach AdamW and clipping",
        f"CUDA allowance {format_gib(CUDA_ALLOWANCE)} (context, workspaces, NCCL, fragmentation) added to every peak",
    ]
    if shape.sharding == "ddp":
        method.append("DDP: its gradient buckets (one more copy of the adapter's gradients) added by arithmetic")
    notes = list(subject.notes)
    inexact = [k for k, v in exact.items() if not v]
    if inexact:
        notes.append(f"{', '.join(inexact)}: at least this large (the search stopped at its trace limit)")
    if capped:
        notes.append(
            f"{', '.join(capped)}: capped at this GPU's share of a step ({shape.samples} samples, minibatch "
            f"{shape.minibatch}); a larger one would not be used"
        )
    if trace["counts"]["value_reads"]:
        notes.append(
            f"{trace['counts']['value_reads']} reads of tensor values answered with True/1 "
            "(AdamW reads its step count; a policy may check a mask); none changes what is allocated"
        )
    if shape.sharding == "fsdp2" and shape.passes > 1:
        notes.append(
            "FSDP2: the adapter's gradients stay unsharded (whole on every GPU) while micro-steps skip the "
            "gradient sync; they are reduce-scattered at the minibatch's last micro-step"
        )
    return MemoryPlan(
        recipe=cfg.recipe,
        policy=cfg.policy,
        architecture=subject.architecture,
        gpus=gpus,
        gpu_memory=memory,
        image_size=size,
        settings=settings,
        phases=phases,
        peak=peak,
        cuda_allowance=CUDA_ALLOWANCE,
        fits=fits,
        largest=largest,
        largest_exact=exact,
        startup=startup,
        host_ram=ram,
        method=method,
        notes=notes,
        seconds=round(time.perf_counter() - started, 1),
        cached=cached,
    )


# -- the trainer's start-up check --------------------------------------------------------------------
def check_fits(
    cfg, gpu_memory: int | str, *, gpus: int | None = None, architecture: str | None = None
) -> MemoryPlan | None:
    """Plan ``cfg`` for ``gpus`` GPUs (default: the launch's ``WORLD_SIZE``) of ``gpu_memory``
    bytes and raise a one-line :class:`ConfigError` naming the setting to change when it cannot
    fit; return the plan when it can. A policy without ``build_for_plan`` passes unchecked
    (returns None). The traces are cached, so a restarted run reads them in seconds.

    Inside a process group (a launched run) the plan runs in a fresh subprocess: it needs a fake
    process group of its own. Call it on one process and share the verdict (every process would
    otherwise trace the same plan)."""
    try:
        plannable_factory(cfg.policy)
    except ConfigError:
        return None
    gpus = int(gpus or os.environ.get("WORLD_SIZE", 1))
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        plan = _plan_in_subprocess(cfg, gpus, gpu_memory, architecture)
    else:
        plan = plan_memory(cfg, gpus=gpus, gpu_memory=gpu_memory, architecture=architecture)
    advice = plan.advice()
    if advice:
        raise ConfigError(f"cast plan: {advice}")
    return plan


def refuse_if_unfit(cfg, dist: Any, gpu_memory: int, log: Any = None) -> None:
    """The trainer's start-up check on a CUDA device: the main process plans (or reads the cached
    plan), every process receives its verdict, and a configuration that cannot fit ends the run
    on every process with one line before any weight is loaded. ``memory_check = false`` skips it."""
    verdict: tuple[str, str] | None = None
    if dist.is_main:
        try:
            plan = check_fits(cfg, gpu_memory, gpus=dist.world)
        except ConfigError as err:
            verdict = ("refuse", f"{err} (memory_check = false skips this check)")
        else:
            if plan is not None:
                verdict = (
                    "fits",
                    f"memory plan: peak {format_gib(plan.peak['total'] + plan.cuda_allowance)} per GPU "
                    f"of {format_gib(plan.gpu_memory)} ({plan.peak['phase']})",
                )
    verdict = dist.broadcast_object(verdict) if dist.active else verdict
    if verdict is None:
        return
    if verdict[0] == "refuse":
        raise ConfigError(verdict[1])
    if log:
        log(verdict[1])


def _plan_in_subprocess(cfg, gpus: int, gpu_memory, architecture: str | None) -> MemoryPlan:
    from cast_core.config import dump_toml

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.toml"
        config.write_text(dump_toml(cfg.to_dict()), encoding="utf-8")
        args = [sys.executable, "-m", "cast_core.memory_plan", str(config), str(gpus), str(parse_memory(gpu_memory))]
        if architecture:
            args.append(architecture)
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
        }
        done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise ConfigError(f"cast plan failed in its subprocess: {lines[-1] if lines else done.returncode}")
    return MemoryPlan(**json.loads(done.stdout.strip().splitlines()[-1]))


def _main(argv: list[str]) -> None:
    """``python -m cast_core.memory_plan CONFIG.toml GPUS GPU_MEMORY [ARCHITECTURE]``: the plan as one
    JSON line (what :func:`check_fits` runs in a subprocess)."""
    from cast_core.config import TrainConfig, load_toml, update_from_file

    cfg = update_from_file(TrainConfig(), load_toml(argv[0]), argv[0]).validate()
    plan = plan_memory(cfg, gpus=int(argv[1]), gpu_memory=int(argv[2]), architecture=argv[3] if len(argv) > 3 else None)
    print(json.dumps(plan.to_dict(), default=str))


if __name__ == "__main__":
    _main(sys.argv[1:])
