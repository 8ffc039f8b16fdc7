"""``cast train``: RL fine-tuning with a recipe, single-component overrides and a config file."""

from __future__ import annotations

import time
from pathlib import Path

import click

DEFAULT_RECIPES = ("shapes", "cast")  # the first one installed is used when --plugin is not given


def build_config(plugin, policy, scorer, window, decomposer, projector, config_file, sets, steps):
    """Defaults → recipe → --config → --set → explicit flags; validated."""
    from cast_core.config import TrainConfig, load_toml, parse_set
    from cast_core.registry import get_recipe, list_components

    cfg = TrainConfig()
    name = plugin
    if name is None:
        installed = set(list_components("recipe"))
        name = next((r for r in DEFAULT_RECIPES if r in installed), None)
    if name is not None:
        recipe = get_recipe(name)
        parts = {k: getattr(recipe, k) for k in ("policy", "scorer", "window", "decomposer", "projector")}
        cfg.update({k: v for k, v in parts.items() if v is not None}, f"recipe {name!r}")
        cfg.update(dict(recipe.settings), f"recipe {name!r}")
        cfg.recipe = name
    if config_file:
        cfg.update(load_toml(config_file), str(config_file))
    cfg.update(parse_set(list(sets)), "--set")
    flags = {"policy": policy, "scorer": scorer, "window": window, "decomposer": decomposer,
             "projector": projector, "steps": steps}
    cfg.update({k: v for k, v in flags.items() if v is not None}, "command line")
    return cfg.validate()


@click.command("train")
@click.option("--plugin", "plugin", help="Recipe to start from (default: shapes, else cast).")
@click.option("--policy", help="Policy component (overrides the recipe).")
@click.option("--scorer", help="Atom scorer component.")
@click.option("--window", help="Window selector component.")
@click.option("--decomposer", help="Decomposer component.")
@click.option("--projector", help="Advantage projector component (spatial = CAST, scalar = Flow-GRPO).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="TOML file of config keys.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override one config key (repeatable).")
@click.option("--steps", type=int, help="Training steps.")
@click.option("--out", type=click.Path(file_okay=False), help="Run directory (default: runs/<recipe>-<time>).")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False, exists=True), help="Continue the run in this directory.")
def train_command(plugin, policy, scorer, window, decomposer, projector, config_file, sets, steps, out, resume_dir):
    """Fine-tune a policy with CAST (or the Flow-GRPO recipe) and write a run directory:
    config.toml, metrics.jsonl, samples/, checkpoints/."""
    from cast_core.config import TrainConfig, load_toml, parse_set
    from cast_core.trainer import Trainer

    if resume_dir:
        if any(x is not None for x in (plugin, policy, scorer, window, decomposer, projector, config_file, out)):
            raise click.UsageError("--resume continues a run as configured; only --steps and --set may change")
        cfg = TrainConfig().update(load_toml(Path(resume_dir) / "config.toml"), f"{resume_dir}/config.toml")
        cfg.update(parse_set(list(sets)), "--set")
        if steps is not None:
            cfg.steps = steps
        run_dir = Path(resume_dir)
    else:
        cfg = build_config(plugin, policy, scorer, window, decomposer, projector, config_file, sets, steps)
        run_dir = Path(out) if out else Path("runs") / f"{cfg.recipe or 'custom'}-{time.strftime('%Y%m%d-%H%M%S')}"
    trainer = Trainer(cfg.validate(), run_dir, resume=bool(resume_dir))
    last = trainer.run()
    click.echo(f"run directory: {run_dir}")
    if last:
        click.echo(f"step {trainer.step}: reward GM {last.get('reward_gm', float('nan')):.4f} "
                   f"AM {last.get('reward_am', float('nan')):.4f}; skipped updates {trainer.counters['skipped_updates']}")
