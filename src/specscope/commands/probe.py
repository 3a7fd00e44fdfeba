"""`specscope probe URL`: measure a server from the outside.

Detects the flavor, builds prompts of an exact token length, streams `repeat * concurrency`
requests (at most `concurrency` in flight), appends each finished request to the run directory,
and prints a summary (a table, or one JSON object with `--json`).

Exit codes: 0 all requests succeeded; 1 the target misbehaved: at least one request failed
(each failure is recorded in requests.jsonl), or the server could not be reached at all (then
the failed detection request is recorded as request 0 with kind `connection`/`timeout_*`);
2 bad usage or bad input (malformed URL, bad flag values, no way to count prompt tokens,
unreadable --prompt-file / --tokenizer, unwritable --out).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from specscope.commands.common import (
    EXIT_OK,
    EXIT_TARGET_MISBEHAVED,
    SLO_HELP,
    err_console,
    fail_usage,
    out_console,
    print_json,
    slo_option,
)
from specscope.commands.inputs import (
    BudgetTokens,
    Model,
    PromptFile,
    TimeoutBetweenChunks,
    TimeoutConnect,
    TimeoutFirstByte,
    TimeoutTotal,
    Tokenizer,
    endpoint_or_fail,
    out_dir_or_fail,
    precision_or_fail,
    prompt_text_or_fail,
    prompt_tokens_or_fail,
    timeouts_or_fail,
    tokenizer_or_fail,
    workload_or_fail,
)
from specscope.entrypoints.probe import (
    PRECISION_BUDGET_S,
    ProbeInputError,
    ProbeOptions,
    ProbeOutcome,
    probe_run,
)
from specscope.probe.client import Timeouts, resolve_api_key
from specscope.probe.endpoint import Endpoint
from specscope.probe.flavors import FLAVORS
from specscope.probe.prompts import MAX_PROMPT_TOKENS, PromptError, TokenizeError
from specscope.probe.workload import MAX_CONCURRENCY
from specscope.probe.workloads import Workload
from specscope.report.contract import probe_json
from specscope.report.probe_terminal import render_probe
from specscope.report.text import labelled
from specscope.trace.model import RequestTrace
from specscope.trace.rundir import runs_home

MAX_REQUESTS = 100_000


@contextlib.contextmanager
def _progress(total: int) -> Iterator[Callable[[RequestTrace], None]]:
    """A transient bar on stderr: requests done, and how many failed."""
    with Progress(
        TextColumn("[bold]probe[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as progress:
        task = progress.add_task("probe", total=total, status="")
        failures = 0

        def on_done(trace: RequestTrace) -> None:
            nonlocal failures
            failures += trace.error is not None
            progress.update(
                task, advance=1, status=f"[red]{failures} failed[/]" if failures else ""
            )

        yield on_done


def probe(
    url: Annotated[str, typer.Argument(help="Server base URL, e.g. http://127.0.0.1:30000")],
    flavor: Annotated[str, typer.Option(help="auto|openai|sglang|vllm|llamacpp")] = "auto",
    api: Annotated[str | None, typer.Option(help="completions|chat|native")] = None,
    prompt_tokens: Annotated[
        int,
        typer.Option(
            help=f"Prompt length in server tokens (at most {MAX_PROMPT_TOKENS}, and the server's "
            "context when it says it)"
        ),
    ] = 256,
    max_tokens: Annotated[int, typer.Option(help="Tokens to generate per request")] = 256,
    repeat: Annotated[int, typer.Option(help="Requests per concurrency slot")] = 1,
    concurrency: Annotated[int, typer.Option(help="Requests in flight at once")] = 1,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos/--no-ignore-eos")] = True,
    out: Annotated[Path | None, typer.Option(help="Write a run directory here")] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
    model: Model = None,
    tokenizer: Tokenizer = None,
    prompt_file: PromptFile = None,
    workload: Annotated[
        str | None,
        typer.Option(
            help="Prompts: mixed (default), code-completion, code-edit, chat, summarisation, "
            "reasoning, long-writing, multi-turn, synthetic, or a JSONL FILE of prompts, "
            "OpenAI messages or ShareGPT conversations"
        ),
    ] = None,
    vary_prompts: Annotated[
        bool,
        typer.Option(
            "--vary-prompts/--same-prompt",
            help="Start every prompt with a per-run reference so no two requests share a prefix "
            "(defeats prefix caching); --same-prompt sends one prompt to every request",
        ),
    ] = True,
    api_key: Annotated[
        str | None,
        typer.Option(
            help="Bearer token (default: $SPECSCOPE_API_KEY); never written anywhere",
            show_default=False,
        ),
    ] = None,
    max_commit_len: Annotated[
        int | None,
        typer.Option(
            help="Largest possible commit length (drafts + 1), to detect chunk coalescing"
        ),
    ] = None,
    timeout_connect: TimeoutConnect = Timeouts.connect,
    timeout_first_byte: TimeoutFirstByte = Timeouts.first_byte,
    timeout_between_chunks: TimeoutBetweenChunks = Timeouts.between_chunks,
    timeout_total: TimeoutTotal = Timeouts.total,
    slo: Annotated[str | None, typer.Option(help=SLO_HELP)] = None,
    precision: Annotated[
        float,
        typer.Option(
            help="After the requests, more of them until decode tps' 95% interval (over requests) "
            "is within +-P (relative, e.g. 0.05) or the budget is spent; 0: off"
        ),
    ] = 0.0,
    budget_s: Annotated[
        float | None,
        typer.Option(
            help=f"Seconds the --precision repeats may add (default {PRECISION_BUDGET_S:.0f})",
            show_default=False,
        ),
    ] = None,
    budget_tokens: BudgetTokens = None,
) -> None:
    """Parse and check the flags, run the probe, print its summary (or --json's object)."""
    endpoint = endpoint_or_fail(url)
    url = endpoint.url
    slo_s = slo_option(slo)
    prompt_tokens_or_fail(prompt_tokens)
    _check_shape(flavor, api, max_tokens, repeat, concurrency, max_commit_len)
    precision_or_fail(precision, budget_s, budget_tokens)
    timeouts = timeouts_or_fail(
        timeout_connect, timeout_first_byte, timeout_between_chunks, timeout_total
    )
    local_count = tokenizer_or_fail(tokenizer)
    prompt_text = prompt_text_or_fail(prompt_file)
    # Where the run goes is checked before anything is sent (a run is always written).
    if out is not None:
        out_dir_or_fail(out)
    else:
        out_dir_or_fail(runs_home(), "the runs home (SPECSCOPE_HOME)")
    wl = workload_or_fail(workload, prompt_text, prompt_file)
    options = _options(
        endpoint,
        flavor=flavor,
        api=api,
        model=model,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        repeat=repeat,
        concurrency=concurrency,
        ignore_eos=ignore_eos,
        out=out,
        timeouts=timeouts,
        api_key=api_key,
        local_count=local_count,
        workload=wl,
        vary_prompts=vary_prompts,
        max_commit_len=max_commit_len,
        slo=slo_s,
        precision=precision,
        budget_s=budget_s,
        budget_tokens=budget_tokens,
        tokenizer=tokenizer,
        prompt_file=prompt_file,
    )
    _print_outcome(_run(options), url, json_)


def _options(
    endpoint: Endpoint,
    *,
    flavor: str,
    api: str | None,
    model: str | None,
    prompt_tokens: int,
    max_tokens: int,
    repeat: int,
    concurrency: int,
    ignore_eos: bool,
    out: Path | None,
    timeouts: Timeouts,
    api_key: str | None,
    local_count: Callable[..., int] | None,
    workload: Workload,
    vary_prompts: bool,
    max_commit_len: int | None,
    slo: dict[str, float] | None,
    precision: float,
    budget_s: float | None,
    budget_tokens: int | None,
    tokenizer: Path | None,
    prompt_file: Path | None,
) -> ProbeOptions:
    """The checked flags as probe_run's options, with run.json's `args`: everything the user
    chose, never the API key."""
    args = {
        "url": endpoint.url,
        "flavor": flavor,
        "api": api,
        "prompt_tokens": prompt_tokens,
        "max_tokens": max_tokens,
        "repeat": repeat,
        "concurrency": concurrency,
        "ignore_eos": ignore_eos,
        "model": model,
        "vary_prompts": vary_prompts,
        "tokenizer": str(tokenizer) if tokenizer else None,
        "prompt_file": str(prompt_file) if prompt_file else None,
        "workload": workload.name,
        "max_commit_len": max_commit_len,
        "slo": slo,
        "precision": precision,
        "budget_s": budget_s,
        "budget_tokens": budget_tokens,
        "timeouts": {
            "connect": timeouts.connect,
            "first_byte": timeouts.first_byte,
            "between_chunks": timeouts.between_chunks,
            "total": timeouts.total,
        },
    }
    return ProbeOptions(
        url=endpoint.url,
        flavor=flavor,
        api=api,
        model=model,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        n_requests=repeat * concurrency,
        concurrency=concurrency,
        ignore_eos=ignore_eos,
        out=out,
        timeouts=timeouts,
        api_key=resolve_api_key(api_key),
        auth=endpoint.auth,
        local_count=local_count,
        workload=workload,
        unique=vary_prompts,
        max_commit_len=max_commit_len,
        slo=slo,
        precision=precision,
        budget_s=budget_s,
        budget_tokens=budget_tokens,
        recorded=args,
    )


def _check_shape(
    flavor: str,
    api: str | None,
    max_tokens: int,
    repeat: int,
    concurrency: int,
    max_commit_len: int | None,
) -> None:
    """--flavor, --api and the request shape within their ranges, or exit 2 naming the flag."""
    if flavor != "auto" and flavor not in FLAVORS:
        fail_usage(f"--flavor must be auto or one of {', '.join(FLAVORS)}, got {flavor!r}")
    if api is not None and api not in ("completions", "chat", "native"):
        fail_usage(f"--api must be completions, chat or native, got {api!r}")
    for name, value in (
        ("--max-tokens", max_tokens),
        ("--repeat", repeat),
        ("--concurrency", concurrency),
    ):
        if value < 1:
            fail_usage(f"{name} must be >= 1, got {value}")
    if concurrency > MAX_CONCURRENCY:
        fail_usage(f"--concurrency must be <= {MAX_CONCURRENCY}, got {concurrency}")
    if repeat * concurrency > MAX_REQUESTS:
        fail_usage(
            f"--repeat x --concurrency must be <= {MAX_REQUESTS}, got {repeat * concurrency}"
        )
    if max_commit_len is not None and max_commit_len < 1:
        fail_usage(f"--max-commit-len must be >= 1, got {max_commit_len}")


def _run(options: ProbeOptions) -> ProbeOutcome:
    """probe_run with a progress bar; a server that cannot count tokens exits 1, input found
    bad once the server answered exits 2."""
    try:
        return asyncio.run(probe_run(options, _progress))
    except TokenizeError as e:  # the server misbehaved: one line, exit 1
        err_console.print(labelled("error:", "bold red", e), highlight=False)
        raise typer.Exit(EXIT_TARGET_MISBEHAVED) from None
    except (ProbeInputError, PromptError) as e:
        fail_usage(str(e))


def _print_outcome(outcome: ProbeOutcome, url: str, json_: bool) -> NoReturn:
    """The summary (or the JSON object), then exit 1 when any request failed, else 0."""
    if json_:
        print_json(probe_json(outcome, url))
    else:
        render_probe(outcome, out_console, err_console)
    raise typer.Exit(EXIT_TARGET_MISBEHAVED if outcome.summary["errors"] else EXIT_OK)
