"""Entry point of cast-windows (``[project.entry-points.cast] windows = "cast_windows.plugin"``).

Only names and lazy factories live here, so loading the plugin imports neither torch nor
open_clip; the ``cast window`` command is imported inside its hook (click only).
"""

from cast_core import hookimpl, lazy


@hookimpl
def register_window_selectors(register):
    register(
        "clip-curvature",
        lazy("cast_windows.clip_curvature:ClipCurvatureSelector"),
        description="CAST: steps up to the structure-formation knee of the x0-to-final similarity curve",
    )
    register("fixed", lazy("cast_windows.baselines:FixedWindow"), description="the same steps every time (start, size)")
    register(
        "random",
        lazy("cast_windows.baselines:RandomWindow"),
        description="Flow-GRPO-Fast: a random window of given size in a range, per step from the run seed",
    )
    register(
        "sliding",
        lazy("cast_windows.baselines:SlidingWindow"),
        description="MixGRPO progressive: the window advances by stride every K steps, then wraps or stops",
    )


@hookimpl
def register_embedders(register):
    register(
        "pixels", lazy("cast_windows.embedders:PixelsEmbedder"), description="downsampled pixels (no model needed)"
    )
    register(
        "clip",
        lazy("cast_windows.embedders:ClipEmbedder"),
        description="open_clip image embeddings, ViT-L-14 by default (extra: clip)",
    )


@hookimpl
def register_commands(cli):
    from cast_windows.commands import window_command

    cli.add_command(window_command)
