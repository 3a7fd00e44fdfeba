"""`specscope runs`: the run history."""

from __future__ import annotations

from typing import Annotated

import typer

from specscope.commands.common import fail_usage


def runs(json_: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False) -> None:
    fail_usage("runs is not implemented yet")
