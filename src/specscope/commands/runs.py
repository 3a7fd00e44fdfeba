"""`specscope runs`: the run history (SQLite index under $SPECSCOPE_HOME, rebuilt from run dirs)."""

from __future__ import annotations

from typing import Annotated

import typer

from specscope.commands.common import fail_usage, out_console, print_json, warn
from specscope.report.contract import runs_json
from specscope.report.runs_terminal import render_runs
from specscope.store import RunIndex
from specscope.store.index import RunHomeError


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
        print_json(runs_json(index.home, rows))
        return
    render_runs(index.home, rows, out_console)
