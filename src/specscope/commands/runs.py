"""`specscope runs`: the run history (SQLite index under $SPECSCOPE_HOME, rebuilt from run dirs)."""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from specscope.commands.common import fail_usage, out_console, print_json, warn
from specscope.report.context import fmt, fmt_ms
from specscope.store import RunIndex
from specscope.store.index import RunHomeError


def _short(path: str, home: str) -> str:
    """The run's name when it lies in the home the title names (what `compare` and `report`
    accept after `HOME/`), else its path relative to the current directory when below it."""
    if os.path.dirname(os.path.abspath(path)) == os.path.abspath(home):
        return os.path.basename(path)
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def runs(
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    index = RunIndex()
    try:
        index.rescan()
        rows = index.list()
    except RunHomeError as e:
        fail_usage(str(e))
    for w in index.warnings:
        warn(w)
    if json_:
        print_json({"home": str(index.home), "runs": [r.to_dict() for r in rows]})
        return
    if not rows:
        out_console.print(
            Text(f"No runs under {index.home} (set SPECSCOPE_HOME to look elsewhere)."),
            highlight=False,
        )
        return
    t = Table(
        title=Text(f"Runs under {index.home} (newest first)"),
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    t.add_column("started", no_wrap=True)
    t.add_column("status", no_wrap=True)
    t.add_column("tok/s", justify="right", no_wrap=True)
    t.add_column("commit", justify="right", no_wrap=True)
    t.add_column("step", justify="right", no_wrap=True)
    t.add_column("run", no_wrap=True)
    t.add_column("endpoint", no_wrap=True, overflow="ellipsis")
    for r in rows:
        started = time.strftime("%m-%d %H:%M", time.localtime(r.started)) if r.started else "-"
        t.add_row(
            started,
            Text(r.status),
            fmt(r.decode_tps, 1),
            fmt(r.mean_commit_len, 2),
            fmt_ms(r.mean_step_s),
            Text(_short(r.path, str(index.home))),
            Text(r.endpoint),
        )
    out_console.print(t)
