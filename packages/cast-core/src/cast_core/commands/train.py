"""``cast train``: RL fine-tuning with a recipe, single-component overrides and a config file."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

#: the exit code of a run a monitor rule ended (docs/rewards.md, "The monitor")
MONITOR_STOP_EXIT = 3

#: what --resume may change: how long and how often, never what is trained or how
RESUMABLE = frozenset(
    {
        "steps",
        "max_minutes",
        "log_every",
        "sample_every",
        "checkpoint_every",
        "keep_checkpoints",
        "log_with",
        "tracker_project",
        "async_scoring",  # timing only: the same numbers either way
        "monitor_every",
        "monitor_scorers",
        "monitor_stop_if",
    }
)


def _finished_steps(run_dir: Path) -> int | None:
    """The step of the run's newest intact checkpoint, if it has one."""
    from cast_core.checkpoints import find_intact_checkpoint, step_of

    ckpt, _ = find_intact_checkpoint(run_dir)
    return None if ckpt is None else step_of(ckpt)


@click.command("train")
@click.option(
    "--recipe",
    "--plugin",
    "recipe",
    help="Recipe to start from (default: shapes, else cast); --plugin is its older name.",
)
@click.option("--policy", help="Policy component (overrides the recipe).")
@click.option("--scorer", help="Atom scorer component.")
@click.option(
    "--window",
    help="Window selector component (see `cast plugins`), or none: no selector, the SDE window is "
    "window_start and window_size (--set).",
)
@click.option("--decomposer", help="Decomposer component.")
@click.option("--projector", help="Advantage projector component (spatial = CAST, scalar = Flow-GRPO).")
@click.option("--objective", help="The update's objective (sde-clipped, nft, awm or a plugin's).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="TOML file of config keys.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override one config key (repeatable).")
@click.option("--steps", type=int, help="Training steps.")
@click.option("--out", type=click.Path(file_okay=False), help="Run directory (default: runs/<recipe>-<time>).")
@click.option(
    "--resume", "resume_dir", type=click.Path(file_okay=False, exists=True), help="Continue the run in this directory."
)
@click.option(
    "--allow-code-prompts",
    is_flag=True,
    help='Let prompts = "module:callable" (from --config, --set or a resumed config.toml) import and '
    "run that code. Recipes may name their own without it.",
)
@click.option(
    "--num-processes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Train with N local processes (torch.distributed; gloo on CPU). Multi-GPU and multi-node: "
    "run `cast train` under accelerate launch or torchrun (docs/distributed.md).",
)
@click.option(
    "--cpu", is_flag=True, help="Run on the CPU (a tiny model, a smoke test): the policy's CPU settings, over --set."
)
def train_command(
    recipe,
    policy,
    scorer,
    window,
    decomposer,
    projector,
    objective,
    config_file,
    sets,
    steps,
    out,
    resume_dir,
    allow_code_prompts,
    num_processes,
    cpu,
):
    """Fine-tune a policy with CAST (or the Flow-GRPO recipe) and write a run directory:
    config.toml, metrics.jsonl, samples/, checkpoints/."""
    from cast_core.cpu_overrides import cpu_sets
    from cast_core.errors import Interrupted
    from cast_core.interrupt import abort_on_signals, exit_code, signal_name
    from cast_core.launch import in_distributed_launch, launch_local

    if num_processes > 1 and not in_distributed_launch():
        if not resume_dir and not out:  # every process must agree on the directory
            out = str(Path("runs") / f"{recipe or 'run'}-{time.strftime('%Y%m%d-%H%M%S')}")
        argv = _argv_without_num_processes(click.get_current_context())
        if out and "--out" not in argv and not resume_dir:
            argv += ["--out", out]
        code, signum = launch_local(num_processes, argv)
        if signum:  # the processes heard it through the launcher, and rank 0 said how they stopped
            raise click.exceptions.Exit(exit_code(signum))
        if code:
            raise click.ClickException(f"{num_processes}-process run failed (exit code {code}); see the messages above")
        from cast_core.monitor import stopped_reason

        run_dir = Path(resume_dir or out)
        if stopped_reason(run_dir):  # rank 0 said why; the launch ends like a one-process run
            raise click.exceptions.Exit(MONITOR_STOP_EXIT)
        return
    sets = cpu_sets(sets, recipe=recipe, policy=policy, config_file=config_file, resume_dir=resume_dir) if cpu else sets
    # until the loop starts there is nothing to checkpoint: a signal ends the command at once,
    # with the shell's exit code (130 / 143) and one line; the loop then stops gracefully
    where: list[Path] = []
    with abort_on_signals():
        try:
            _train(
                recipe, policy, scorer, window, decomposer, projector, objective, config_file, sets, steps,
                out, resume_dir, allow_code_prompts, where,
            )  # fmt: skip
        except KeyboardInterrupt as err:
            signum = getattr(err, "signum", 2)
            err = Interrupted(_aborted(signal_name(signum), where[0] if where else None), signum)
            _quiet_unless_main(err)
            raise err from None
        except Interrupted as err:
            _quiet_unless_main(err)
            raise


def _quiet_unless_main(err: Exception) -> None:
    """In a launch every process stops alike; rank 0 alone says so, the others just exit with
    the same code."""
    import os

    if os.environ.get("RANK", "0") != "0":  # leave as leave_without_teardown does: no gloo teardown
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(err.exit_code)


def _aborted(what: str, run_dir: Path | None) -> str:
    """The one line for a run ended at once: before its loop, or by a second signal."""
    if run_dir is None or not (run_dir / "config.toml").exists():
        return f"aborted by {what} before training started; nothing was written"
    from cast_core.resume import finished_work

    done = _finished_steps(run_dir)
    if done is None and finished_work(run_dir):
        return f"aborted by {what} before the run's first checkpoint; nothing to resume: start a new run with --out"
    if done is None:
        return f"aborted by {what} before the first step; start again with `cast train --resume {run_dir}`"
    return (
        f"aborted by {what}; nothing after checkpoint step {done} was kept. Continue with "
        f"`cast train --resume {run_dir}`"
    )


def _train(
    recipe, policy, scorer, window, decomposer, projector, objective, config_file, sets, steps,
    out, resume_dir, allow_code_prompts, where: list,
) -> None:  # fmt: skip
    """The command itself, single process or one process of a launch; ``where`` receives the run
    directory as soon as it is known (for the line an abort prints)."""
    import os

    from cast_core.config import TrainConfig, build_config, check_installed, load_toml, parse_set, update_from_file
    from cast_core.launch import in_distributed_launch
    from cast_core.prompts import check_code_prompts
    from cast_core.resume import check_resume

    if in_distributed_launch() and not (out or resume_dir):
        raise click.UsageError("a multi-process run needs --out (each process would otherwise pick its own directory)")

    from cast_core.trainer import Trainer

    if resume_dir:
        if any(
            x is not None for x in (recipe, policy, scorer, window, decomposer, projector, objective, config_file, out)
        ):
            raise click.UsageError("--resume continues a run as configured; only --steps and --set may change")
        cfg = update_from_file(
            TrainConfig(), load_toml(Path(resume_dir) / "config.toml"), Path(resume_dir) / "config.toml"
        )
        check_code_prompts(cfg, allow_code_prompts, f"{resume_dir}/config.toml")
        main = os.environ.get("RANK", "0") == "0"
        check_resume(resume_dir, cfg.to_dict(), RESUMABLE, lambda msg: click.echo(msg, err=True) if main else None)
        changes = parse_set(list(sets))
        fixed = sorted(k for k in changes if k.split(".")[0] not in RESUMABLE)
        if fixed:  # the run's maths and components are what its checkpoints were trained with
            raise click.UsageError(
                f"--resume cannot change {', '.join(fixed)}: a run continues as it was configured; "
                f"on resume only --steps and --set {'/'.join(sorted(RESUMABLE))} may change. "
                "Start a new run (--out) to train otherwise"
            )
        cfg.update(changes, "--set")
        if steps is not None:
            cfg.steps = steps
        done = _finished_steps(Path(resume_dir))
        if done is not None and cfg.steps < done:
            raise click.UsageError(
                f"{resume_dir} is already at step {done}; give --steps above {done} to train further"
            )
        if done is not None and cfg.steps == done:  # a run killed after its last checkpoint: nothing left to do
            click.echo(
                f"{resume_dir} is complete at step {done}; nothing to do (give --steps above {done} to train further)"
            )
            return
        run_dir = Path(resume_dir)
        where.append(run_dir)
    else:
        cfg = build_config(
            recipe=recipe,
            components={
                "policy": policy,
                "scorer": scorer,
                "window": window,
                "decomposer": decomposer,
                "projector": projector,
                "objective": objective,
            },
            config_file=config_file,
            sets=sets,
            steps=steps,
        )
        check_installed(cfg)  # an unknown or doubly registered name: refused before any directory
        check_code_prompts(cfg, allow_code_prompts, "config key 'prompts'")
        run_dir = Path(out) if out else Path("runs") / f"{cfg.recipe or 'custom'}-{time.strftime('%Y%m%d-%H%M%S')}"
        where.append(run_dir)
    trainer = Trainer(cfg.validate(), run_dir, resume=bool(resume_dir))
    first, skipped_before = trainer.step, trainer.counters["skipped_updates"]
    last = trainer.run()
    trainer.close()
    if not trainer.dist.is_main:
        from cast_core.distributed import leave_without_teardown

        leave_without_teardown()  # a worker has nothing left to do (docs/testing.md)
        return
    ran, skipped = trainer.step - first, trainer.counters["skipped_updates"] - skipped_before
    if ran and skipped == ran:  # nothing was learned: a run that "succeeds" like this hides a broken judge
        raise click.ClickException(
            f"every one of the {ran} update(s) was skipped (no group could be scored, or "
            f"non-finite advantages); see {run_dir}/metrics.jsonl 'skipped' and the log above"
        )
    click.echo(f"run directory: {run_dir}")
    if last:
        click.echo(
            f"step {trainer.step}: reward GM {last.get('reward_gm', float('nan')):.4f} "
            f"AM {last.get('reward_am', float('nan')):.4f}; skipped updates {trainer.counters['skipped_updates']}"
        )
    if trainer.stopped_by_monitor:  # a planned stop, but not a finished run: a pipeline must not go on as if
        click.echo(f"stopped by the monitor at step {trainer.step}: {trainer.stopped_by_monitor}", err=True)
        if not in_distributed_launch():  # under --num-processes the parent exits 3 (torchrun would say "failed")
            raise click.exceptions.Exit(MONITOR_STOP_EXIT)


def _argv_without_num_processes(ctx: click.Context) -> list[str]:
    """The ``cast train`` arguments rebuilt from the parsed options, minus ``--num-processes``
    (the children are the processes)."""
    flags = {"config_file": "--config", "sets": "--set", "resume_dir": "--resume"}
    args = ["train"]
    for name, value in ctx.params.items():
        if name == "num_processes" or value is None or value == () or value is False:
            continue
        if value is True:  # an on/off flag
            args.append("--" + name.replace("_", "-"))
            continue
        for v in value if isinstance(value, tuple) else (value,):
            args += [flags.get(name, "--" + name.replace("_", "-")), str(v)]
    return args
