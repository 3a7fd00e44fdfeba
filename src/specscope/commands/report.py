"""`specscope report RUN_DIR`: re-render any run, partial ones too (re-analyses when analysis.json
is missing or unreadable). A watch's run directory (a watch.json, docs/watch.md) renders as
the watch's timeline instead: windows, alerts and recorded faults (report/watch_html.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specscope.analysis.serving import serving_of_run
from specscope.commands.common import Verbose, err_console, fail_usage, out_console
from specscope.report import context_from_run, render_terminal, write_html, write_markdown
from specscope.report.csv_export import write_csv
from specscope.report.notices import render_written
from specscope.report.watch_html import write_watch_html
from specscope.report.watch_terminal import render_recorded
from specscope.store.analyses import load_analysis
from specscope.telemetry.server_info import max_commit_len_from
from specscope.trace.rundir import REPORT_HTML, RunDirError
from specscope.watch.rundir import WatchRunError, is_watch_run, read_watch_run


def report(
    run_dir: Annotated[Path, typer.Argument(help="Run directory")],
    html: Annotated[Path | None, typer.Option(help="Write the HTML report here")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Write a Markdown report here")] = None,
    reanalyze: Annotated[
        bool, typer.Option("--reanalyze", help="Analyse again even if analysis.json exists")
    ] = False,
    verbose: Verbose = False,
    csv_dir: Annotated[
        Path | None,
        typer.Option(
            "--csv",
            help="Write requests.csv (one row per request) and steps.csv (one row per "
            "timed verify step) into this directory",
        ),
    ] = None,
) -> None:
    if is_watch_run(run_dir):
        if markdown is not None or csv_dir is not None or reanalyze:
            fail_usage(f"{run_dir} is a watch: --markdown, --csv and --reanalyze do not apply")
        _report_watch(run_dir, html)
        return
    try:
        run, analysis = load_analysis(run_dir, reanalyze=reanalyze)
    except RunDirError as e:
        fail_usage(str(e))
    max_commit = max_commit_len_from(run.info.server_info)
    if analysis.serving is None:  # an analysis.json written before serving metrics existed
        analysis.serving = serving_of_run(run, max_commit_len=max_commit)
    ctx = context_from_run(run, analysis, str(run_dir))
    render_terminal(ctx, out_console, verbose=verbose)
    if html is None and markdown is None:
        html = run_dir / REPORT_HTML
    try:
        if html is not None:
            write_html(ctx, html)
            render_written("HTML report", [html], err_console)
        if markdown is not None:
            write_markdown(ctx, markdown)
            render_written("Markdown report", [markdown], err_console)
        if csv_dir is not None:
            req_csv, step_csv = write_csv(run, csv_dir, max_commit_len=max_commit)
            render_written("CSV", [req_csv, step_csv], err_console)
    except OSError as e:
        fail_usage(f"cannot write report: {e}")


def _report_watch(run_dir: Path, html: Path | None) -> None:
    """A watch's run directory: its summary on the terminal, its timeline as HTML."""
    try:
        recorded = read_watch_run(run_dir)
    except WatchRunError as e:
        fail_usage(str(e))
    render_recorded(recorded, out_console)
    path = html if html is not None else run_dir / REPORT_HTML
    try:
        write_watch_html(recorded, path)
    except OSError as e:
        fail_usage(f"cannot write report: {e}")
    render_written("HTML report", [path], err_console)
