"""The probe's input options, shared by `probe` and `diagnose` (same names, same checks).

Each option is an `Annotated` alias so both commands declare it in one line, and each check
turns bad input into one `fail_usage` line (exit 2), never a traceback. Here are the checks that
parse text or read the disk (the URL, --tokenizer, --prompt-file, --workload, --out) and
diagnose's --prompt-tokens and --timeout-* (the rules of `ProbeOptions`, which checks probe's
flags itself: entrypoints).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from specscope.commands.common import fail_usage
from specscope.entrypoints.options import timeouts_problem
from specscope.probe.client import Timeouts
from specscope.probe.endpoint import Endpoint, EndpointError, parse_endpoint
from specscope.probe.prompts import (
    PromptError,
    load_local_tokenizer,
    prompt_length_problem,
)
from specscope.probe.workloads import Workload, WorkloadError, resolve_workload
from specscope.probe.workloads.files import FilePrompt

Model = Annotated[
    str | None, typer.Option(help="Model name for OpenAI bodies (default: the first of /v1/models)")
]
Tokenizer = Annotated[
    Path | None,
    typer.Option(
        help="Local tokenizer.json: counts prompt tokens when the server has no tokenize "
        "endpoint, and streamed text when the server reports no token counts"
    ),
]
PromptFile = Annotated[Path | None, typer.Option(help="Use this text as every prompt")]
TimeoutConnect = Annotated[float, typer.Option(help="Seconds to connect")]
TimeoutFirstByte = Annotated[float, typer.Option(help="Seconds from send to first byte")]
TimeoutBetweenChunks = Annotated[float, typer.Option(help="Seconds between reads")]
TimeoutTotal = Annotated[float, typer.Option(help="Seconds per request")]
BudgetTokens = Annotated[
    int | None,
    typer.Option(
        help="Generated tokens the --precision repeats may add (default: no limit)",
        show_default=False,
    ),
]
Workers = Annotated[
    int,
    typer.Option(
        help="Run the load as N worker processes, one event loop each (concurrency and requests "
        "split across them); one run directory, every percentile from raw samples"
    ),
]
RayAddress = Annotated[
    str | None,
    typer.Option(
        help="Run the --workers as actors of this Ray cluster (ADDR, auto, or local for a "
        "private one); needs pip install 'specscope[scale]'"
    ),
]


def endpoint_or_fail(url: str) -> Endpoint:
    """The server URL without its credentials (they go in a header), or exit 2."""
    try:
        return parse_endpoint(url)
    except EndpointError as e:
        fail_usage(str(e))


def timeouts_or_fail(
    connect: float, first_byte: float, between_chunks: float, total: float
) -> Timeouts:
    """The --timeout-* seconds (each finite and > 0), or exit 2 naming the flag."""
    timeouts = Timeouts(
        connect=connect, first_byte=first_byte, between_chunks=between_chunks, total=total
    )
    problem = timeouts_problem(timeouts)
    if problem:
        fail_usage(problem)
    return timeouts


def prompt_tokens_or_fail(n: int) -> int:
    problem = prompt_length_problem(n)
    if problem:
        fail_usage(problem)
    return n


def tokenizer_or_fail(path: Path | None) -> Callable[..., int] | None:
    if path is None:
        return None
    try:
        return load_local_tokenizer(path)
    except PromptError as e:
        fail_usage(str(e))


def prompt_text_or_fail(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        fail_usage(f"--prompt-file: cannot read {path}: {e}")
    if not text.strip():
        fail_usage(f"--prompt-file: {path} is empty")
    return text


def workload_or_fail(
    spec: str | None, prompt_text: str | None, prompt_file: Path | None = None
) -> Workload:
    """--workload NAME|FILE, or --prompt-file's text (from prompt_text_or_fail) as a one-prompt
    workload; exit 2 on bad input or when both are given."""
    if spec is not None and prompt_text is not None:
        fail_usage("give either --workload or --prompt-file, not both")
    if prompt_text is None:
        try:
            return resolve_workload(spec)
        except WorkloadError as e:
            fail_usage(str(e))
    return Workload(
        "prompt-file",
        file_prompts=(FilePrompt(prompt_text, None, "prompt-file"),),
        source=str(prompt_file) if prompt_file is not None else "--prompt-file",
    )


def out_dir_or_fail(path: Path, what: str = "--out") -> Path:
    """`path` when a run directory can be written there (checked, not created: a command that
    then finds the server down leaves no empty directory behind), or exit 2 naming why."""
    if path.exists():
        if not path.is_dir():
            fail_usage(f"{what}: {path} exists and is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            fail_usage(f"{what}: {path} is not writable")
        return path
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        fail_usage(f"{what}: cannot create {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        fail_usage(f"{what}: cannot create {path}: {parent} is not writable")
    return path
