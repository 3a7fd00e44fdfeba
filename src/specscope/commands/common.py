"""Helpers shared by commands: the two consoles, one stdout JSON object, clear errors with the
contract's exit codes (untrusted text: report.text)."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from specscope.report.text import labelled

# Progress and tables go to stderr so that `--json` leaves exactly one object on stdout.
# soft_wrap: a warning or an error naming a long path stays one line (grep-able, and a test
# looking for the whole path finds it), whatever the terminal width.
err_console = Console(stderr=True, soft_wrap=True)
out_console = Console()

EXIT_OK = 0
EXIT_TARGET_MISBEHAVED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # Ctrl-C: what was measured is kept and printed


def warn(message: object) -> None:
    err_console.print(labelled("warning:", "yellow", message), highlight=False)


# The console script (cli.main) sets this when its command line asks for `--json`: errors then
# also leave one JSON object on stdout.
JSON_ERRORS = {"on": False}


def say_error(message: object, exit_code: int = EXIT_BAD_INPUT) -> None:
    """An error as one line on stderr (`error: ...`); with `--json`, also one JSON object on
    stdout ({"error", "exit_code"})."""
    err_console.print(labelled("error:", "bold red", message), highlight=False)
    if JSON_ERRORS["on"]:
        print_json({"error": str(message), "exit_code": exit_code})


def fail_usage(message: object) -> NoReturn:
    """Bad usage or bad input: one clear line naming the input, exit 2, no traceback."""
    say_error(message)
    raise typer.Exit(EXIT_BAD_INPUT)


def slo_option(text: str | None) -> dict[str, float] | None:
    """`--slo ttft=2s,tpot=50ms` as seconds by metric; bad text exits 2 with the reason."""
    if text is None:
        return None
    from specscope.analysis.serving import SloError, parse_slo

    try:
        return parse_slo(text)
    except SloError as e:
        fail_usage(str(e))


SLO_HELP = (
    "Latency SLOs for goodput, e.g. ttft=2s,tpot=50ms (also itl, step, e2e; units s, ms, "
    "us): the share and rate of requests meeting all of them"
)


# The diagnosis' report folds its statistics (report.terminal): this shows them all, in
# `diagnose` and in `report` alike.
Verbose = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="Show every finding's evidence and test (method, p, q), the notes and how the "
        "intervals were obtained",
    ),
]


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()
