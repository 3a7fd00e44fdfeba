"""`specscope serve`: the twin or the engine behind an OpenAI-compatible server on loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specscope.commands.common import fail_usage


def serve(
    backend: Annotated[str, typer.Option(help="engine|twin")] = "twin",
    scenario: Annotated[Path | None, typer.Option(help="Twin scenario TOML")] = None,
    host: Annotated[str, typer.Option(help="Bind address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free)")] = 30000,
) -> None:
    fail_usage("serve is not implemented yet")
