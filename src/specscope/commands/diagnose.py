"""`specscope diagnose [URL]`: reproduce, measure two ways, read the server, explain the gap."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specscope.commands.common import fail_usage


def diagnose(
    url: Annotated[str | None, typer.Argument(help="Server URL; omit to diagnose the embedded default")] = None,
    baseline: Annotated[Path | None, typer.Option(help="A baseline run dir for attribution")] = None,
    logs: Annotated[list[str] | None, typer.Option(help="Server log file(s) to read")] = None,
    logs_cmd: Annotated[str | None, typer.Option(help="Command printing server logs (no shell)")] = None,
    metrics_url: Annotated[str | None, typer.Option(help="Prometheus /metrics URL")] = None,
    prompt_tokens: Annotated[int, typer.Option(help="Prompt length of the user's case")] = 2700,
    max_tokens: Annotated[int, typer.Option(help="Generation length of the user's case")] = 1500,
    quick: Annotated[bool, typer.Option("--quick", help="A one-minute version")] = False,
    out: Annotated[Path | None, typer.Option(help="Run directory")] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    fail_usage("diagnose is not implemented yet")
