"""`specscope runs`' terminal view: one row per indexed run, newest first."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from specscope.report.context import fmt, fmt_ms
from specscope.store.index import RunRow


def _short(path: str, home: str) -> str:
    """The run's name when it lies in the home the title names (what `compare` and `report`
    accept after `HOME/`), else its path relative to the current directory when below it."""
    if os.path.dirname(os.path.abspath(path)) == os.path.abspath(home):
        return os.path.basename(path)
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


WIDE_COLUMNS = 110  # room for the endpoint beside a full run path


def render_runs(home: Path, rows: list[RunRow], console: Console) -> None:
    """The runs under `home` as a table, or one line saying there are none."""
    if not rows:
        console.print(
            Text(f"No runs under {home} (set SPECSCOPE_HOME to look elsewhere)."),
            highlight=False,
        )
        return
    t = Table(
        title=Text(f"Runs under {home} (newest first)"),
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    # The short columns keep their width at 80 columns (a figure cut to "…" says nothing) and
    # the run's path folds rather than lose its end; the endpoint is left out where the
    # terminal has no room for it (`runs --json` has it).
    wide = console.width >= WIDE_COLUMNS
    t.add_column("started", no_wrap=True, min_width=11)
    t.add_column("status", no_wrap=True, min_width=8)
    t.add_column("tok/s", justify="right", no_wrap=True, min_width=7)
    t.add_column("commit", justify="right", no_wrap=True, min_width=6)
    t.add_column("step", justify="right", no_wrap=True, min_width=9)
    t.add_column("run", overflow="fold")
    if wide:
        t.add_column("endpoint", no_wrap=True, overflow="ellipsis")
    for r in rows:
        started = time.strftime("%m-%d %H:%M", time.localtime(r.started)) if r.started else "-"
        # where the run is, then what it is: its kind and the served model (or twin scenario)
        run = Text(_short(r.path, str(home)))
        run.append("\n" + " · ".join(x for x in (r.kind, r.model) if x), style="dim")
        cells = [
            started,
            Text(r.status, style="bold red" if r.status == "failed" else ""),
            fmt(r.decode_tps, 1),
            fmt(r.mean_commit_len, 2),
            fmt_ms(r.mean_step_s),
            run,
        ]
        t.add_row(*cells, *([Text(r.endpoint)] if wide else []))
    console.print(t)
