"""``cast report``: (re)build a run directory's report.html."""

from __future__ import annotations

import click


@click.command("report")
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True))
def report_command(run_dir):
    """Write RUN_DIR/report.html (curves, samples, eval-*.json tables, grid-*.png pictures)."""
    from cast_core.report import write_report

    click.echo(str(write_report(run_dir, warn=lambda m: click.echo(m, err=True))))
