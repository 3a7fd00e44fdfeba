"""`specscope logs PATH...|-`: read what a server logged about speculation."""

from __future__ import annotations

from typing import Annotated

import typer

from specscope.commands.common import fail_usage


def logs(
    paths: Annotated[list[str], typer.Argument(help="Log files (.gz ok) or - for stdin")],
    format_: Annotated[str, typer.Option("--format", help="auto|sglang|vllm|llamacpp|ddtree")] = "auto",
    since: Annotated[str | None, typer.Option(help="Only records at or after T")] = None,
    until: Annotated[str | None, typer.Option(help="Only records before T")] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    fail_usage("logs is not implemented yet")
