"""`specscope probe URL`: measure a server from the outside.

Detects the flavor, builds prompts of an exact token length, streams `repeat * concurrency`
requests (at most `concurrency` in flight), appends each finished request to the run directory,
and prints a summary (a table, or one JSON object with `--json`).

Exit codes: 0 all requests succeeded; 1 the target misbehaved: at least one request failed
(each failure is recorded in requests.jsonl), or the server could not be reached at all (then
the failed detection request is recorded as request 0 with kind `connection`/`timeout_*`);
2 bad usage or bad input (malformed URL, a server that answers but is not an OpenAI-compatible
one: probe.preflight, no run directory then; bad flag values, no way to count prompt tokens,
unreadable --prompt-file / --tokenizer, unwritable --out).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from specscope.commands.common import (
    EXIT_INTERRUPTED,
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
    RayAddress,
    TimeoutBetweenChunks,
    TimeoutConnect,
    TimeoutFirstByte,
    TimeoutTotal,
    Tokenizer,
    Workers,
    endpoint_or_fail,
    out_dir_or_fail,
    prompt_text_or_fail,
    tokenizer_or_fail,
    workload_or_fail,
)
from specscope.entrypoints import OptionError
from specscope.entrypoints.probe import (
    PRECISION_BUDGET_S,
    ProbeInputError,
    ProbeOptions,
    ProbeOutcome,
    probe_run,
)
from specscope.probe.client import Timeouts, resolve_api_key
from specscope.probe.endpoint import redact_url
from specscope.probe.preflight import NotOpenAIServer
from specscope.probe.prompts import MAX_PROMPT_TOKENS, PromptError, TokenizeError
from specscope.probe.workloads import Workload
from specscope.report.contract import probe_json
from specscope.report.notices import render_interrupted, render_partial_probe
from specscope.report.probe_terminal import render_probe
from specscope.report.progress import request_progress
from specscope.report.text import labelled
from specscope.trace.model import RequestTrace
from specscope.trace.rundir import runs_home


def _progress(total: int) -> contextlib.AbstractContextManager[Callable[[RequestTrace], None]]:
    """probe_run's progress hook: a transient bar on stderr (report.progress)."""
    return request_progress(total, err_console)


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
            help="Prompts: mixed (default), code-completion, code-edit, prose-edit, chat, "
            "summarisation, reasoning, long-writing, multi-turn, synthetic, or a JSONL FILE of "
            "prompts, OpenAI messages or ShareGPT conversations"
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
    metrics_url: Annotated[
        str | None,
        typer.Option(
            help="The server's Prometheus /metrics URL: scraped before and after the requests "
            "(vLLM's engine-timed steps, against which the stream's are held)"
        ),
    ] = None,
    workers: Workers = 1,
    ray_address: RayAddress = None,
) -> None:
    """Parse and check the flags, run the probe, print its summary (or --json's object)."""
    endpoint = endpoint_or_fail(url)
    slo_s = slo_option(slo)
    # The flags are checked (ProbeOptions checks itself) before any file is read.
    try:
        options = ProbeOptions(
            url=endpoint.url,
            flavor=flavor,
            api=api,
            model=model,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            repeat=repeat,
            concurrency=concurrency,
            ignore_eos=ignore_eos,
            out=out,
            timeouts=Timeouts(
                connect=timeout_connect,
                first_byte=timeout_first_byte,
                between_chunks=timeout_between_chunks,
                total=timeout_total,
            ),
            api_key=resolve_api_key(api_key),
            auth=endpoint.auth,
            unique=vary_prompts,
            max_commit_len=max_commit_len,
            slo=slo_s,
            precision=precision,
            budget_s=budget_s,
            budget_tokens=budget_tokens,
            metrics_url=redact_url(metrics_url) if metrics_url else None,
            workers=workers,
            ray_address=ray_address,
        )
    except OptionError as e:
        fail_usage(str(e))
    local_count = tokenizer_or_fail(tokenizer)
    prompt_text = prompt_text_or_fail(prompt_file)
    # Where the run goes is checked before anything is sent (a run is always written).
    if out is not None:
        out_dir_or_fail(out)
    else:
        out_dir_or_fail(runs_home(), "the runs home (SPECSCOPE_HOME)")
    wl = workload_or_fail(workload, prompt_text, prompt_file)
    options = replace(
        options,
        local_count=local_count,
        workload=wl,
        recorded=_recorded(options, wl, tokenizer, prompt_file),
    )
    _print_outcome(_run(options), endpoint.url, json_)


def _recorded(
    o: ProbeOptions, workload: Workload, tokenizer: Path | None, prompt_file: Path | None
) -> dict[str, Any]:
    """run.json's `args`: everything the user chose, never the API key."""
    return {
        "url": o.url,
        "flavor": o.flavor,
        "api": o.api,
        "prompt_tokens": o.prompt_tokens,
        "max_tokens": o.max_tokens,
        "repeat": o.repeat,
        "concurrency": o.concurrency,
        "ignore_eos": o.ignore_eos,
        "model": o.model,
        "vary_prompts": o.unique,
        "tokenizer": str(tokenizer) if tokenizer else None,
        "prompt_file": str(prompt_file) if prompt_file else None,
        "workload": workload.name,
        "max_commit_len": o.max_commit_len,
        "slo": o.slo,
        "precision": o.precision,
        "budget_s": o.budget_s,
        "budget_tokens": o.budget_tokens,
        "metrics_url": o.metrics_url,
        "workers": o.workers,
        "ray_address": o.ray_address,
        "timeouts": {
            "connect": o.timeouts.connect,
            "first_byte": o.timeouts.first_byte,
            "between_chunks": o.timeouts.between_chunks,
            "total": o.timeouts.total,
        },
    }


def _run(options: ProbeOptions) -> ProbeOutcome:
    """probe_run with a progress bar; a server that cannot count tokens exits 1, input found
    bad once the server answered exits 2."""
    try:
        return asyncio.run(probe_run(options, _progress))
    except TokenizeError as e:  # the server misbehaved: one line, exit 1
        err_console.print(labelled("error:", "bold red", e), highlight=False)
        raise typer.Exit(EXIT_TARGET_MISBEHAVED) from None
    except (ProbeInputError, PromptError, NotOpenAIServer) as e:
        fail_usage(str(e))


def _print_outcome(outcome: ProbeOutcome, url: str, json_: bool) -> NoReturn:
    """The summary (or the JSON object), then exit 130 after Ctrl-C (what was measured is
    printed first, as diagnose does), 1 when any request failed, else 0."""
    if json_:
        print_json(probe_json(outcome, url))
    else:
        if outcome.interrupted:
            render_partial_probe(out_console)
        render_probe(outcome, out_console, err_console)
    if outcome.interrupted:
        render_interrupted(err_console)
        raise typer.Exit(EXIT_INTERRUPTED)
    raise typer.Exit(EXIT_TARGET_MISBEHAVED if outcome.summary["errors"] else EXIT_OK)
