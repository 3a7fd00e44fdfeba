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
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from specscope.commands.common import (
    EXIT_OK,
    EXIT_TARGET_MISBEHAVED,
    SLO_HELP,
    err_console,
    fail_usage,
    labelled,
    out_console,
    print_json,
    slo_option,
    untrusted,
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
from specscope.probe.flavors import FLAVORS
from specscope.probe.prompts import MAX_PROMPT_TOKENS, PromptError, TokenizeError
from specscope.probe.workload import MAX_CONCURRENCY
from specscope.report.context import fmt_ci, precision_line
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


def _fmt(v: Any, unit: str = "", nd: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{nd}f}{unit}"
    return f"{v}{unit}"


def chunks_vs_steps_note(s: dict[str, Any]) -> str | None:
    """A line saying why the commit length and the tokens per chunk differ (when they do by
    more than 5%): the same table must not show two numbers for one idea without a reason."""
    commit, per_chunk = s.get("mean_commit_len"), s.get("tokens_per_chunk_mean")
    if (
        not isinstance(commit, float | int)
        or not isinstance(per_chunk, float | int)
        or not per_chunk
    ):
        return None
    if abs(commit - per_chunk) <= 0.05 * per_chunk:
        return None
    source = s.get("mean_commit_len_source") or "?"
    if per_chunk > commit:
        return (
            f"the server sends several verify steps per chunk (stream interval or "
            f"coalescing); the commit length ({source}) counts tokens per verify step"
        )
    return (
        f"chunks carry fewer tokens than a verify step commits (the server splits steps "
        f"over several events); the commit length ({source}) counts tokens per verify step"
    )


def category_rich_table(rows: list[dict[str, Any]]) -> Table:
    """The per-category rows of a summary as a terminal table (fits 80 columns)."""
    t = Table(
        title="by category",
        caption="commit len: tokens per verify step, all steps, from "
        "the client's steps (* from the server's figures); copied: output found in the prompt",
    )
    t.add_column("category", no_wrap=True)
    for col in ("req", "commit len", "w/o loops", "tok/s", "loops", "copied"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        star = "*" if r["commit_source"] == "server" else ""
        t.add_row(
            untrusted(r["category"]),
            str(r["requests"]),
            _fmt(r["mean_commit_len"], nd=2) + star,
            _fmt(r["mean_commit_len_without_loops"], nd=2),
            _fmt(r["decode_tps"], nd=1),
            str(r["looping_requests"]),
            "–" if r.get("copied_share") is None else f"{r['copied_share']:.0%}",
        )
    return t


def _render(o: ProbeOutcome) -> None:
    s = o.summary
    t = Table(
        title=untrusted(f"specscope probe · {o.info.endpoint} · {o.info.flavor}/{o.info.api}"),
        show_header=False,
    )
    t.add_column("metric", style="bold")
    t.add_column("value")
    t.add_row("requests (ok / failed)", f"{s['requests']} ({s['ok']} / {s['errors']})")
    t.add_row("TTFT p50 / p99", f"{_fmt(s['ttft_s_p50'], ' s')} / {_fmt(s['ttft_s_p99'], ' s')}")
    t.add_row(
        "decode tok/s (token-weighted)",
        _fmt(s["decode_tps"], nd=1) + fmt_ci(s.get("decode_tps_ci"), 1),
    )
    if (reached := precision_line(o.precision)) is not None:
        t.add_row("precision", reached)
    t.add_row(
        "mean commit length (all steps)",
        f"{_fmt(s['mean_commit_len'], nd=2)}"
        + fmt_ci(s.get("mean_commit_len_ci"), 2)
        + (f" ({s['mean_commit_len_source']})" if s["mean_commit_len_source"] else ""),
    )
    if s.get("mean_commit_len_per_drafted_step") is not None:
        share = s.get("drafted_step_share")
        t.add_row(
            "per drafted step (server)",
            f"{s['mean_commit_len_per_drafted_step']:.2f}"
            + (f"; {share:.0%} of steps drafted" if share is not None else "")
            + "; steps that drafted nothing are left out of the server's figure",
        )
    t.add_row(
        "mean step time",
        f"{_fmt(s['mean_step_s'] and s['mean_step_s'] * 1e3, ' ms', 2)}"
        + fmt_ci(s.get("mean_step_s_ci"), 2, 1e3, "ms")
        + (f" ({s['mean_step_s_source']})" if s["mean_step_s_source"] else ""),
    )
    if s.get("speculation"):
        t.add_row("speculation", untrusted(f"{s['speculation']}: {s['speculation_reason']}"))
    t.add_row("e2e p50 / p99", f"{_fmt(s['e2e_s_p50'], ' s')} / {_fmt(s['e2e_s_p99'], ' s')}")
    t.add_row("tokens per chunk (mean)", _fmt(s["tokens_per_chunk_mean"], nd=2))
    why = chunks_vs_steps_note(s)
    if why:
        t.add_row(Text("why they differ", style="dim"), untrusted(why))
    for r in s["steps"]["unreliable_reasons"][:2]:
        t.add_row(
            Text("client steps unreliable", style="yellow"),
            untrusted(f"{r['reason']} ({r['requests']} req)"),
        )
    if s["error_kinds"]:
        t.add_row(
            Text("errors", style="red"),
            untrusted(", ".join(f"{k}: {v}" for k, v in s["error_kinds"].items())),
        )
    pc = s.get("prefix_cache")
    if pc:
        t.add_row("prefix cache hits", f"{pc['hits']} of {pc['requests']}")
    loops = s.get("repetition_loops") or []
    if loops:
        t.add_row(
            Text("repetition loops", style="yellow"),
            f"{len(loops)} request(s) end in a loop (acceptance inflated; see by category)",
        )
    t.add_row("run directory", untrusted(o.run_dir))
    out_console.print(t)
    if s.get("by_category"):
        out_console.print(category_rich_table(s["by_category"]))
    if o.serving:
        from specscope.report.terminal import render_serving  # plotly-heavy package: only here

        render_serving(o.serving, out_console)
    for tr in [x for x in o.traces if x.error is not None][:3]:
        err_console.print(
            labelled(f"request {tr.index}:", "red", f"{tr.error.kind}: {tr.error.message}"),  # type: ignore[union-attr]
            highlight=False,
        )


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
    endpoint = endpoint_or_fail(url)
    url = endpoint.url
    slo_s = slo_option(slo)
    prompt_tokens_or_fail(prompt_tokens)
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
    # Recorded arguments: everything the user chose, never the API key.
    args = {
        "url": url,
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
        "workload": wl.name,
        "max_commit_len": max_commit_len,
        "slo": slo_s,
        "precision": precision,
        "budget_s": budget_s,
        "budget_tokens": budget_tokens,
        "timeouts": {
            "connect": timeout_connect,
            "first_byte": timeout_first_byte,
            "between_chunks": timeout_between_chunks,
            "total": timeout_total,
        },
    }
    options = ProbeOptions(
        url=url,
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
        workload=wl,
        unique=vary_prompts,
        max_commit_len=max_commit_len,
        slo=slo_s,
        precision=precision,
        budget_s=budget_s,
        budget_tokens=budget_tokens,
        recorded=args,
    )
    try:
        outcome = asyncio.run(probe_run(options, _progress))
    except TokenizeError as e:  # the server misbehaved: one line, exit 1
        err_console.print(labelled("error:", "bold red", e), highlight=False)
        raise typer.Exit(EXIT_TARGET_MISBEHAVED) from None
    except (ProbeInputError, PromptError) as e:
        fail_usage(str(e))
    failed = outcome.summary["errors"]
    if json_:
        print_json(
            {
                "run_dir": str(outcome.run_dir),
                "endpoint": url,
                "flavor": outcome.info.flavor,
                "api": outcome.info.api,
                "model": outcome.info.model,
                "detection": outcome.detection,
                "notes": outcome.notes,
                "summary": outcome.summary,
                "serving": outcome.serving,
                "precision": outcome.precision,
                "failed_requests": [
                    {
                        "index": t.index,
                        "kind": t.error.kind,
                        "message": t.error.message,
                        "http_status": t.error.http_status,
                    }
                    for t in outcome.traces
                    if t.error is not None
                ][:20],
            }
        )
    else:
        _render(outcome)
    raise typer.Exit(EXIT_TARGET_MISBEHAVED if failed else EXIT_OK)
