"""``cast serve-scorer``: run a registered atom scorer as an HTTP service (cast_rewards.serve)."""

from __future__ import annotations

import ipaddress

import click

# the defaults of cast_rewards.serve (MAX_REQUEST_MB, MAX_IMAGES, MAX_SIDE), repeated here so that
# `cast --help` does not import torch; test_serve_security checks that the two agree
MAX_REQUEST_MB, MAX_IMAGES, MAX_SIDE = 512, 256, 4096


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine: 127.0.0.0/8, ::1 or localhost. Any
    other name may resolve to a public interface, so it counts as exposed."""
    host = host.strip().strip("[]")
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, has_token: bool, insecure: bool) -> str | None:
    """Refuse (one-line ConfigError) to serve a tokenless judge beyond loopback unless
    ``--insecure``; then the warning line to print, else None."""
    from cast_core.errors import ConfigError

    if has_token or is_loopback(host):
        return None
    if not insecure:
        raise ConfigError(
            f"refusing to serve on {host} without a token: anyone who can reach it could use the judge; "
            "give --token-file FILE (or set CAST_SCORER_TOKEN), bind to 127.0.0.1, "
            "or pass --insecure on a network you trust"
        )
    return f"warning: serving on {host} without a token (--insecure): anyone who can reach this port can use the judge"


@click.command("serve-scorer")
@click.option("--scorer", "-s", required=True, help="Registered atom scorer to serve (e.g. soft-tifa).")
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="scorer_kwargs.KEY=VALUE",
    help="Scorer factory argument, e.g. scorer_kwargs.path=DIR (repeatable).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Interface to listen on. Any other than loopback (e.g. 0.0.0.0: every one) needs --token-file or --insecure.",
)
@click.option("--port", default=8410, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    help="File holding the token clients must send (Authorization: Bearer); default: $CAST_SCORER_TOKEN if set.",
)
@click.option(
    "--insecure", is_flag=True, help="Serve on a non-loopback address without a token (a trusted network only)."
)
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
@click.option(
    "--max-request-mb",
    default=MAX_REQUEST_MB,
    show_default=True,
    type=click.IntRange(1, 65_536),
    help="Largest request body in MiB; a larger one gets 413 as soon as it passes the limit.",
)
@click.option(
    "--max-images",
    default=MAX_IMAGES,
    show_default=True,
    type=click.IntRange(1, 1_000_000),
    help="Most images in one request (413 above).",
)
@click.option(
    "--max-side",
    default=MAX_SIDE,
    show_default=True,
    type=click.IntRange(1, 1_000_000),
    help="Largest image height or width in pixels (413 above).",
)
def serve_scorer_command(
    scorer, sets, host, port, token_file, insecure, max_batch, max_wait_ms, max_request_mb, max_images, max_side
):
    """Serve SCORER over HTTP (GET /health, POST /score) for `--scorer remote --set scorer_kwargs.url=...`."""
    from cast_core.config import dotted_kwargs
    from cast_core.registry import get_atom_scorer
    from cast_rewards.remote_wire import load_token

    token = load_token(token_file)  # before the judge loads: a bad token file is refused in a second
    warning = check_exposure(host, token is not None, insecure)
    from cast_rewards.serve import serve

    judge = get_atom_scorer(scorer, **dotted_kwargs(sets, "scorer_kwargs"))
    if warning:
        click.echo(warning, err=True)
    auth = "a token required" if token else "no token"
    click.echo(f"serving {scorer!r} on http://{host}:{port} (GET /health, POST /score; {auth})", err=True)
    serve(
        judge,
        scorer,
        host,
        port,
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        max_request_bytes=max_request_mb * 2**20,
        max_images=max_images,
        max_side=max_side,
        token=token,
    )
