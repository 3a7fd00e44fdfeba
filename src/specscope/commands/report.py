"""`specscope report RUN_DIR`: re-render any run, partial ones too."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specscope.commands.common import fail_usage


def report(
    run_dir: Annotated[Path, typer.Argument(help="Run directory")],
    html: Annotated[Path | None, typer.Option(help="Write the HTML report here")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Write a Markdown report here")] = None,
) -> None:
    fail_usage("report is not implemented yet")
