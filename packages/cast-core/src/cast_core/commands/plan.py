"""``cast plan``: the per-GPU memory of a training configuration, traced before launch
(:mod:`cast_core.memory_plan`), with the largest batch sizes that fit and the host RAM a node
needs to load the model."""

from __future__ import annotations

import json

import click


def _size(ctx, param, value):
    if value is None:
        return None
    if value < 16:
        raise click.BadParameter("an image side in pixels, e.g. 512 or 1024")
    return value


@click.command("plan")
@click.option(
    "--recipe",
    "--plugin",
    "recipe",
    help="Recipe to start from (default: shapes, else cast); --plugin is its older name.",
)
@click.option("--policy", help="Policy component (overrides the recipe).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="TOML file of config keys.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override one config key (repeatable).")
@click.option("--gpus", type=click.IntRange(min=1), default=1, show_default=True, help="GPUs the run uses.")
@click.option(
    "--gpu-memory",
    default="80GiB",
    show_default=True,
    help="Memory of one GPU: 80GiB, 141GB (decimal), or bytes. An '80 GB' H100 reports 79.6 GiB.",
)
@click.option("--image-size", type=int, callback=_size, help="Square image side in pixels (default: the run's).")
@click.option(
    "--architecture",
    help="Model to plan: a shipped name (flux2-dev, flux2-klein-4b, flux2-klein-9b, qwen-image …), a pipeline "
    "directory or an architecture JSON (default: policy_kwargs.path when it is a local directory, else the "
    "policy's default).",
)
@click.option("--no-cache", is_flag=True, help="Trace again even when a cached trace of this configuration exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (bytes).")
def plan_command(recipe, policy, config_file, sets, gpus, gpu_memory, image_size, architecture, no_cache, as_json):
    """Trace one sampling batch, one decode and one training micro-step of the run at real size on
    fake tensors (nothing is allocated, no weights are read) and print each GPU's peak by category,
    whether it fits, and the largest micro_batch_size, sample_batch_size and decode_batch_size
    that do."""
    from cast_core.config import build_config
    from cast_core.memory_plan import plan_memory

    cfg = build_config(
        recipe=recipe, components={"policy": policy}, config_file=config_file, sets=sets, require_scorer=False
    )
    plan = plan_memory(
        cfg,
        gpus=gpus,
        gpu_memory=gpu_memory,
        image_size=image_size,
        architecture=architecture,
        use_cache=not no_cache,
    )
    if as_json:
        click.echo(json.dumps(plan.to_dict(), indent=2, default=str))
        return
    click.echo(render(plan))


PHASE_ORDER = ("sample", "decode", "train")


def _head(plan, phase: str) -> str:
    return f"{phase} ({plan.phases[phase]['batch']})"


def _adapter(s: dict) -> str:
    size = f"{s['adapter_parameters'] / 1e6:.1f}M" if s["adapter_parameters"] >= 10**5 else str(s["adapter_parameters"])
    return f"LoRA r{s['lora_rank']} ({size})" if s.get("lora_rank") else f"adapter of {size} parameters"


def _g(n: float) -> str:
    return f"{n / 2**30:7.2f}"


def render(plan) -> str:
    """The plan as text: one column per phase, one row per category, then the verdict."""
    from cast_core.memory_trace import CATEGORIES

    s = plan.settings
    lines = [
        f"cast plan · {plan.recipe or plan.policy} · {plan.architecture} · {plan.gpus} GPU(s) of "
        f"{plan.gpu_memory / 2**30:.1f} GiB · {plan.image_size[0]}x{plan.image_size[1]} · {s['sharding']}"
        f" · {_adapter(s)} · {s['base_dtype']} base"
        f" · checkpointing {'on' if s['gradient_checkpointing'] else 'off'}",
        "",
        f"{'GiB per GPU':<14}" + "".join(f"{_head(plan, p):>16}" for p in PHASE_ORDER),
    ]
    for cat in CATEGORIES:
        if cat == "gathered" and not any(plan.phases[p]["bytes"].get(cat) for p in plan.phases):
            continue
        lines.append(f"{cat:<14}" + "".join(f"{_g(plan.phases[p]['bytes'][cat]):>16}" for p in PHASE_ORDER))
    lines.append(f"{'total':<14}" + "".join(f"{_g(plan.phases[p]['total']):>16}" for p in PHASE_ORDER))
    lines.append(f"{'+ CUDA':<14}" + f"{_g(plan.cuda_allowance):>16}" * 3)
    need = plan.peak["total"] + plan.cuda_allowance
    verdict = "fits" if plan.fits else "DOES NOT FIT"
    lines += [
        "",
        f"peak {need / 2**30:.2f} GiB ({plan.peak['phase']}) of {plan.gpu_memory / 2**30:.2f} GiB: {verdict}",
        "largest that fit: "
        + ", ".join(
            f"{k} {'=' if plan.largest_exact.get(k, True) else '>='} {v} (now {s[k]})" for k, v in plan.largest.items()
        ),
    ]
    if not plan.fits:
        lines.append(f"change: {plan.advice().split(': ', 1)[-1]}")
    st = plan.startup
    if st.get("text_encoder"):
        where = "on the GPU" if st["on_gpu"] else "on the CPU"
        lines.append(
            f"start-up: text encoder {st['text_encoder']} {st['text_encoder_bytes'] / 2**30:.1f} GiB {where}"
            + ("" if st["fits"] else " — DOES NOT FIT the GPU")
        )
    ram, other = plan.host_ram, plan.host_ram["other_path"]
    lines.append(
        f"host RAM per node: {ram['per_node_bytes'] / 2**30:.1f} GiB ({ram['path']})"
        + (f"; {other['per_node_bytes'] / 2**30:.1f} GiB {other['path']}" if other else "")
    )
    lines += [f"note: {n}" for n in [*plan.notes, *ram["notes"]]]
    lines += [f"method: {m}" for m in plan.method]
    lines.append(f"{'read from cache' if plan.cached else 'traced'} in {plan.seconds:.0f} s")
    return "\n".join(lines)
