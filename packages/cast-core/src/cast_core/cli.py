"""The ``cast`` command line.

Kept import-light on purpose: ``cast --help`` must not import torch. Sub-commands import what they
need inside their function bodies. Plugins add commands through the ``register_commands`` hook.
"""

from __future__ import annotations

import errno
import json
import sys
from typing import Any

import click

from cast_core.errors import CastError, PluginError
from cast_core.plugins import PluginFailure, failures, load_plugins, pm, record_failure, source_of
from cast_core.version import __version__


class CastGroup(click.Group):
    """A click group that prints cast's deliberate errors as one line instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CastError as err:
            exc = click.ClickException(str(err))
            exc.exit_code = getattr(err, "exit_code", exc.exit_code)
            raise exc from err
        except KeyboardInterrupt as err:  # click would print "Aborted!" and exit 1
            raise _interrupted(err) from None
        except OSError as err:
            if err.errno != errno.ENAMETOOLONG:
                raise
            raise click.ClickException(_name_too_long(err)) from err


def _interrupted(err: KeyboardInterrupt) -> click.ClickException:
    """Ctrl-C (or SIGTERM turned into :class:`~cast_core.interrupt.Aborted`) in any command, or while
    plugins load: one line and the shell's code for the signal (130 / 143), as `cast train` does, so
    that a script can tell an interrupt from a failure."""
    import signal

    signum = getattr(err, "signum", signal.SIGINT)
    name = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name
    exc = click.ClickException(f"interrupted by {name}")
    exc.exit_code = 128 + int(signum)
    return exc


def _name_too_long(err: OSError) -> str:
    """One line for a path the file system refuses as too long (any command's --out, wherever
    the path is first touched), naming its longest part."""
    path = str(err.filename or "")
    longest = max(path.split("/"), key=lambda part: len(part.encode()), default="")
    shown = path if len(path) <= 100 else f"{path[:60]}...{path[-30:]}"
    return (
        f"{shown}: the path is too long for the file system (its longest name is {len(longest.encode())} bytes; "
        "each name may have at most 255 bytes and the whole path 4096): choose a shorter --out"
    )


@click.group(cls=CastGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="cast", message="%(prog)s %(version)s")
def cli() -> None:
    """cast — RL fine-tuning of flow-matching text-to-image models with CAST.

    Components (policies, scorers, decomposers, window selectors, projectors, recipes) come
    from plugins; `cast plugins` lists what is installed.
    """


#: plugin name -> commands it added (filled by install_plugin_commands)
PLUGIN_COMMANDS: dict[str, list[str]] = {}
_installed: set[int] = set()


def install_plugin_commands(group: click.Group = cli) -> None:
    """Run every ``register_commands`` hook once per group; a hook that raises is recorded as failed."""
    if id(group) in _installed:
        return
    _installed.add(id(group))
    load_plugins()
    for impl in pm.hook.register_commands.get_hookimpls():
        before = dict(group.commands)
        source = source_of(impl.plugin_name)
        try:
            impl.function(**({"cli": group} if "cli" in impl.argnames else {}))
        except Exception as err:  # noqa: BLE001 - one plugin's bug must not take the CLI down
            group.commands.clear()
            group.commands.update(before)
            record_failure(
                PluginFailure(
                    source.entry_point,
                    source.distribution,
                    source.version,
                    f"register_commands raised {type(err).__name__}: {err}",
                ),
                err,
            )
            continue
        replaced = [n for n, c in before.items() if group.commands.get(n) is not c]
        if replaced:
            group.commands.update(before)
            raise PluginError(f"{source.distribution} tried to replace the existing command(s) {', '.join(replaced)}")
        added = sorted(set(group.commands) - set(before))
        if added:
            PLUGIN_COMMANDS[impl.plugin_name] = added


@cli.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def plugins_command(as_json: bool) -> None:
    """List installed plugin distributions, their components, and plugins that failed to load."""
    from cast_core.inventory import inventory

    data = inventory(PLUGIN_COMMANDS)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="cast plugins", show_lines=False)
    for col in ("distribution", "version", "kind", "components"):
        table.add_column(col)
    for entry in data["plugins"]:
        kinds = entry["components"] or {"": []}
        for i, (kind, names) in enumerate(kinds.items()):
            table.add_row(
                entry["name"] if i == 0 else "",
                entry["version"] if i == 0 else "",
                kind,
                ", ".join(names) or "(none yet)",
            )
    console.print(table)
    for f in data["failed"]:
        console.print(
            f"[red]failed:[/red] {f['name']} from {f['distribution']} {f['version']}: {f['error']}",
            markup=True,
            highlight=False,
        )


def _add_core_commands() -> None:
    # Each command lives in its own module; importing them is cheap (click only at module level).
    from cast_core.commands.compare import compare_command
    from cast_core.commands.decompose import decompose_command
    from cast_core.commands.eval import eval_command
    from cast_core.commands.plan import plan_command
    from cast_core.commands.report import report_command
    from cast_core.commands.sample import sample_command
    from cast_core.commands.score import score_command
    from cast_core.commands.signal import signal_command
    from cast_core.commands.train import train_command

    for command in (
        decompose_command,
        score_command,
        train_command,
        sample_command,
        eval_command,
        report_command,
        signal_command,
        compare_command,
        plan_command,
    ):
        cli.add_command(command)


_add_core_commands()


def _warn_failures() -> None:
    for f in failures():
        click.echo(
            f"cast: warning: skipped {f.describe()}. See `cast plugins`; CAST_STRICT_PLUGINS=1 makes this an error.",
            err=True,
        )


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: load plugins, add their commands, run."""
    try:
        install_plugin_commands(cli)
    except CastError as err:
        click.echo(f"Error: {err}", err=True)
        sys.exit(1)
    except KeyboardInterrupt as err:  # Ctrl-C while the plugins import (torch, diffusers ...)
        exc = _interrupted(err)
        click.echo(f"Error: {exc.message}", err=True)
        sys.exit(exc.exit_code)
    _warn_failures()
    cli.main(args=argv, prog_name="cast")


if __name__ == "__main__":  # `python -m cast_core.cli`: what `cast train --num-processes N` starts per process
    main()
