"""`specscope runs`: the run history (SQLite index under $SPECSCOPE_HOME, rebuilt from run dirs)."""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from specscope.commands.common import out_console, print_json
from specscope.report.context import fmt, fmt_ms
from specscope.store import RunIndex


def _short(path: str) -> str:
    """The run dir relative to the current directory when it lies below it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def runs(json_: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False) -> None:
    index = RunIndex()
    index.rescan()
    rows = index.list()
    if json_:
        print_json({"home": str(index.home), "runs": [r.to_dict() for r in rows]})
        return
    if not rows:
        out_console.print(f"No runs under {index.home} (set SPECSCOPE_HOME to look elsewhere).",
                          markup=False, highlight=False)
        return
    t = Table(title=Text(f"Runs under {index.home} (newest first)"), title_justify="left")
    t.add_column("started", no_wrap=True)
    t.add_column("status", no_wrap=True)
    t.add_column("tok/s", justify="right", no_wrap=True)
    t.add_column("commit", justify="right", no_wrap=True)
    t.add_column("step", justify="right", no_wrap=True)
    t.add_column("run dir", overflow="fold")
    t.add_column("endpoint", overflow="fold")
    for r in rows:
        started = time.strftime("%m-%d %H:%M", time.localtime(r.started)) if r.started else "-"
        t.add_row(started, Text(r.status), fmt(r.decode_tps, 1), fmt(r.mean_commit_len, 2),
                  fmt_ms(r.mean_step_s), Text(_short(r.path)), Text(r.endpoint))
    out_console.print(t)
