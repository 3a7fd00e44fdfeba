"""`specscope compare RUN_A RUN_B`: tps ratio split into acceptance and step time."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specscope.commands.common import fail_usage


def compare(
    run_a: Annotated[Path, typer.Argument(help="Baseline run dir")],
    run_b: Annotated[Path, typer.Argument(help="Observed run dir")],
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    fail_usage("compare is not implemented yet")
