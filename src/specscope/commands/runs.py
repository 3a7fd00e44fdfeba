"""`specscope runs`: the run history (SQLite index under $SPECSCOPE_HOME, rebuilt from run dirs)."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from specscope.commands.common import out_console, print_json
from specscope.report.context import fmt, fmt_ms
from specscope.store import RunIndex


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
    t = Table(title=f"Runs under {index.home}", title_justify="left")
    for col in ("started", "kind", "status", "endpoint", "tok/s", "commit len", "step", "path"):
        t.add_column(col)
    for r in rows:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.started)) if r.started else "-"
        t.add_row(started, Text(r.kind), Text(r.status), Text(r.endpoint), fmt(r.decode_tps, 1),
                  fmt(r.mean_commit_len, 2), fmt_ms(r.mean_step_s), Text(r.path))
    out_console.print(t)
