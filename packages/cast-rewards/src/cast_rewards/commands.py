"""``cast serve-scorer``: run a registered atom scorer as an HTTP service (cast_rewards.serve)."""

from __future__ import annotations

import click


@click.command("serve-scorer")
@click.option("--scorer", "-s", required=True, help="Registered atom scorer to serve (e.g. soft-tifa).")
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="scorer_kwargs.KEY=VALUE",
    help="Scorer factory argument, e.g. scorer_kwargs.path=DIR (repeatable).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on (0.0.0.0: every one).")
@click.option("--port", default=8410, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--max-batch",
    default=32,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Images per scorer call when concurrent requests are batched.",
)
@click.option(
    "--max-wait-ms",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0, 10_000),
    help="How long a request waits for others to batch with.",
)
def serve_scorer_command(scorer, sets, host, port, max_batch, max_wait_ms):
    """Serve SCORER over HTTP (GET /health, POST /score) for `--scorer remote --set scorer_kwargs.url=...`."""
    from cast_core.config import dotted_kwargs
    from cast_core.registry import get_atom_scorer
    from cast_rewards.serve import serve

    judge = get_atom_scorer(scorer, **dotted_kwargs(sets, "scorer_kwargs"))
    click.echo(f"serving {scorer!r} on http://{host}:{port} (GET /health, POST /score)", err=True)
    serve(judge, scorer, host, port, max_batch=max_batch, max_wait_ms=max_wait_ms)
