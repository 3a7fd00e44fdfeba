"""`specscope probe URL`: measure a server from the outside."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specscope.commands.common import fail_usage


def probe(
    url: Annotated[str, typer.Argument(help="Server base URL, e.g. http://127.0.0.1:30000")],
    flavor: Annotated[str, typer.Option(help="auto|openai|sglang|vllm|llamacpp")] = "auto",
    api: Annotated[str | None, typer.Option(help="completions|chat|native")] = None,
    prompt_tokens: Annotated[int, typer.Option(help="Prompt length in server tokens")] = 256,
    max_tokens: Annotated[int, typer.Option(help="Tokens to generate per request")] = 256,
    repeat: Annotated[int, typer.Option(help="Requests per concurrency slot")] = 1,
    concurrency: Annotated[int, typer.Option(help="Requests in flight at once")] = 1,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos/--no-ignore-eos")] = True,
    out: Annotated[Path | None, typer.Option(help="Write a run directory here")] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    fail_usage("probe is not implemented yet")
