"""``cast sample``: draw images from a policy with its own ODE sampler (optionally an adapter)."""

from __future__ import annotations

import click

from cast_core.commands.inputs import policy_opt_option, seed_option


@click.command("sample")
@click.option("--policy", required=True, help="Policy component.")
@click.option("--prompt", "-p", required=True, help="Prompt text.")
@click.option("--steps", default=20, show_default=True, type=click.IntRange(1, 1000), help="Denoising steps.")
@click.option(
    "--seed",
    default="0",
    show_default=True,
    callback=seed_option,
    help="Noise seed: one integer, 0 or more and below 2**63 (the seed syntax of every command, e.g. 3).",
)
@click.option(
    "--images", "-n", default=1, show_default=True, type=click.IntRange(1, 1024), help="How many images (side by side)."
)
@click.option(
    "--adapter", type=click.Path(file_okay=False, exists=True), help="Adapter directory (e.g. a checkpoint's adapter/)."
)
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False), help="Output PNG.")
@policy_opt_option
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="policy_kwargs.KEY=VALUE",
    help="Policy factory argument in the training config's spelling, e.g. policy_kwargs.path=DIR (repeatable).",
)
@click.option("--cpu", is_flag=True, help="Run on the CPU: the policy's device settings, over --set and --policy-opt.")
def sample_command(policy, prompt, steps, seed, images, adapter, out, policy_opts, sets, cpu):
    """Generate images for --prompt with the policy's deterministic ODE sampler."""
    import torch
    from PIL import Image

    from cast_core.commands.inputs import load_adapter_option, policy_kwargs
    from cast_core.commands.output import check_output, save_result
    from cast_core.cpu_overrides import policy_cpu_sets
    from cast_core.registry import get_policy
    from cast_core.sampling import ode_images
    from cast_core.viz import _to_pil

    check_output(out, "--out", image=True)  # before the sampling, not after
    sets = policy_cpu_sets(policy, sets) if cpu else sets
    pol = get_policy(policy, **policy_kwargs(policy_opts, sets))
    if adapter:
        load_adapter_option(pol, adapter)
    gen = torch.Generator().manual_seed(seed)
    imgs = ode_images(pol, [prompt] * images, num_steps=steps, generator=gen)
    tiles = [_to_pil(img, 1) for img in imgs]
    canvas = Image.new("RGB", (sum(t.width for t in tiles), tiles[0].height), "white")
    for i, t in enumerate(tiles):
        canvas.paste(t, (i * t.width, 0))
    click.echo(str(save_result(out, canvas.save)))
