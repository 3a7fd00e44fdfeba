"""`specscope diagnose [URL]`: reproduce, measure two ways, read the server, explain the gap.

The seed story in one command: the user's full generation, a two-point pair, a context sweep and
an output sweep go into one run dir; server evidence (logs, a Prometheus delta) is attached;
analysis explains the number; the report is printed and written (analysis.json, report.html).
Without URL the embedded default server is started on loopback, diagnosed, and stopped.

Exit codes: 0 ok; 1 the target misbehaved (failed requests, server died; what was measured is
still reported); 2 bad usage/input. Ctrl-C stops cleanly and reports a partial run (exit 130).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from specscope.analysis.model import Analysis
from specscope.analysis.workload_summary import diagnosis_workload_keys
from specscope.commands import diagnose_support as support
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
    Model,
    PromptFile,
    TimeoutBetweenChunks,
    TimeoutConnect,
    TimeoutFirstByte,
    TimeoutTotal,
    Tokenizer,
    endpoint_or_fail,
    out_dir_or_fail,
    prompt_text_or_fail,
    prompt_tokens_or_fail,
    timeouts_or_fail,
    tokenizer_or_fail,
    workload_or_fail,
)
from specscope.commands.probe import category_rich_table
from specscope.experiments import ExecutionResult, Executor, Plan, diagnosis_plan
from specscope.experiments import Progress as StepProgress
from specscope.experiments.precision_loop import PrecisionOutcome, repeat_until_precise
from specscope.probe.client import Timeouts, resolve_api_key
from specscope.probe.endpoint import redact_url
from specscope.probe.workloads import resolve_workload
from specscope.report import (
    context_from_run,
    render_plan,
    render_terminal,
    write_html,
    write_markdown,
)
from specscope.store import RunIndex
from specscope.store.analyses import analysis_json, analyze_run, plain_values
from specscope.store.compare import attribution_json
from specscope.trace import Run, RunDirWriter, RunInfo, load_run
from specscope.trace.rundir import REPORT_HTML, RunDirError, new_run_id

EXIT_INTERRUPTED = 130
CALIBRATION_ATTEMPTS = 3
DEFAULT_PROMPT_TOKENS = 2700


def _parse_levels(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail_usage(f"--concurrency expects comma-separated integers like 1,2,4 (got {text!r})")
    if not levels or any(c < 1 or c > 256 for c in levels):
        fail_usage(f"--concurrency levels must be within 1..256 (got {text!r})")
    return levels


class _ProgressBar:
    """Turns executor progress events into a rich bar on stderr (tokens generated so far)."""

    def __init__(self, enabled: bool):
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} tok"),
            TextColumn("{task.fields[reqs]}"), TimeElapsedColumn(), TimeRemainingColumn(),
            console=err_console, transient=False, disable=not enabled,
        )
        self.task: Any = None

    def __enter__(self) -> _ProgressBar:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)  # type: ignore[arg-type]

    def __call__(self, ev: StepProgress) -> None:
        if self.task is None:
            self.task = self.progress.add_task(ev.step.tag, total=ev.tokens_total, reqs="")
        elif ev.step_index == 0 and ev.requests_done == 0:  # a new plan: the precision repeats
            self.progress.reset(self.task, total=ev.tokens_total)
        errors = "" if ev.last is None or ev.last.error is None else f" last error: {ev.last.error.kind}"
        self.progress.update(self.task, description=ev.step.tag, completed=ev.tokens_done,
                             reqs=f"{ev.requests_done}/{ev.requests_total} req{errors}")


async def _measure(
    url: str, args: dict[str, Any], writer_holder: dict[str, Any], result: ExecutionResult,
    show_progress: bool, inputs: support.ProbeInputs,
) -> tuple[Plan, RunDirWriter]:
    """Detect the server, calibrate, print the plan, then run it. Fills `result` as it goes so
    that a Ctrl-C (task cancelled) keeps what was measured."""
    workload = inputs.workload or resolve_workload(None)
    async with support.open_target(url, flavor=args["flavor"], api=args["api"],
                                   inputs=inputs) as target:
        desc = target.describe()
        max_context = desc.get("max_context")
        if args["prompt_tokens"] is None:
            args["prompt_tokens"] = prompt_tokens_or_fail(
                await target.count_tokens(inputs.prompt_text or ""))
        plan = diagnosis_plan.build(args["prompt_tokens"], args["max_tokens"], quick=args["quick"],
                                    repeat=args["repeat"], max_context=max_context,
                                    concurrency_levels=args["concurrency_levels"],
                                    categories=None if workload.file_prompts
                                    else list(workload.categories),
                                    precision=args["precision"], budget_s=args["budget_s"],
                                    budget_tokens=args["budget_tokens"])
        info = RunInfo(kind="diagnose", endpoint=url, flavor=str(desc.get("flavor") or ""),
                       api=str(desc.get("api") or ""), model=desc.get("model"),
                       server_info=desc.get("server_info") or {},
                       args={k: v for k, v in args.items() if k != "api_key"},
                       notes=[*(args.get("embedded_notes") or []),
                              f"workload {desc.get('workload')}; " + (
                                  f"every prompt unique (run reference {desc['prompt_reference']} "
                                  "first)" if desc.get("prompt_reference") else
                                  "--same-prompt: requests share prompts (a prefix cache may "
                                  "serve repeats)")])
        try:
            writer = RunDirWriter(args["out"], info)
        except OSError as e:
            fail_usage(f"--out: cannot write a run directory at {args['out']}: {e.strerror or e}")
        writer_holder["writer"] = writer
        executor = Executor(target, writer, max_consecutive_errors=3)
        writer_holder["metrics_before"] = await support.scrape_metrics(args.get("metrics_url"))
        calib: list = []
        step = diagnosis_plan.calibration_step(args["prompt_tokens"], max_context)
        for _ in range(CALIBRATION_ATTEMPTS):  # a flaky server gets a few tries, a dead one not
            calib += await executor.run_step(step)
            last = calib[-1].error
            if last is None or last.kind.startswith("timeout"):
                break  # a request that ran out of time would only run out of time again
        result.traces.extend(calib)
        plan.calibrate(*support.rates_from(calib))
        info.args["plan"] = plan.to_dict()
        writer.write_info()
        render_plan(plan, err_console, url)
        if calib and all(t.error is not None for t in calib):
            e = calib[0].error
            result.stopped_reason = f"the server did not answer a first request ({e.kind}: {e.message})"
            return plan, writer
        executor.on_progress = None
        if plan.precision is not None:
            writer_holder["precision"] = outcome = PrecisionOutcome(plan.precision.target)
        with _ProgressBar(show_progress) as bar:
            executor.on_progress = bar
            await executor.run(plan, result)
            if plan.precision is not None and result.complete:
                await repeat_until_precise(executor, plan, result, outcome)
        return plan, writer


def _finish(
    writer: RunDirWriter, result: ExecutionResult, interrupted: bool, args: dict[str, Any],
    baseline: Run | None, metrics_before: Any, precision: PrecisionOutcome | None = None,
) -> tuple[Run, Analysis, Path]:
    """Close the run, attach server evidence, analyse, write analysis.json and report.html."""
    if precision is not None:
        writer.info.precision = precision.closed(interrupted=interrupted,
                                                 stopped_reason=result.stopped_reason)
    records, notes = support.collect_telemetry(args, writer.info, metrics_before)
    if records:
        writer.append_telemetry(r.model_dump(mode="json") for r in records)
    writer.info.notes.extend(notes)
    if interrupted:
        writer.close("partial", "interrupted (Ctrl-C)")
    elif result.stopped_reason:
        writer.close("partial", result.stopped_reason)
    else:
        writer.close("complete")
    run = load_run(writer.path)
    try:
        analysis = analyze_run(run, baseline=baseline, telemetry=records or None)
    except Exception as e:  # analysis is pure code over our own data: a bug, but keep the run
        analysis = Analysis(requests=len(run.requests), errors=len(run.errors),
                            notes=[f"analysis failed: {e.__class__.__name__}: {e}"])
    analysis.run_dir = str(writer.path)
    analysis.partial = run.info.status != "complete"
    writer.write_analysis(analysis_json(analysis))
    html_path = writer.path / REPORT_HTML
    ctx = context_from_run(run, analysis, str(writer.path))
    write_html(ctx, html_path)
    write_markdown(ctx, writer.path / "report.md")
    with contextlib.suppress(Exception):  # the index is a cache; never fail a run over it
        RunIndex().add(writer.path)
    return run, analysis, html_path


# analysis.headline's labels and intervals, beside the ARCHITECTURE §8 headline keys
HEADLINE_KEYS = ("mean_commit_len_source", "mean_commit_len_per_drafted_step",
                 "drafted_step_share", "mean_step_s_source", "decode_tps_ci", "mean_commit_len_ci",
                 "mean_step_s_ci", "ttft_s_ci", "interval_method")


def contract_json(analysis: Analysis, run: Run, html_path: Path) -> dict[str, Any]:
    """ARCHITECTURE §8 keys, plus status/partial/errors/report_html."""
    return {
        "decode_tps": analysis.decode_tps,
        "ttft_s": analysis.ttft_s,
        "mean_commit_len": analysis.mean_commit_len,
        "mean_step_s": analysis.mean_step_s,
        **{k: getattr(analysis, k) for k in HEADLINE_KEYS},
        "findings": [
            {"id": f.id, "summary": f.summary, "confidence": f.confidence, "factor": f.factor,
             "evidence": [plain_values(e.model_dump()) for e in f.evidence], "next": f.next}
            for f in analysis.findings
        ],
        "attribution": attribution_json(analysis.attribution),
        "breakeven": analysis.breakeven,
        "run_dir": analysis.run_dir,
        "status": run.info.status,
        "status_reason": run.info.status_reason,
        "partial": analysis.partial,
        "requests": len(run.requests),
        "errors": [{"index": r.index, "tag": r.spec.tag, "kind": r.error.kind, "message": r.error.message}
                   for r in run.requests if r.error is not None][:50],
        "no_finding_reason": analysis.no_finding_reason,
        "finding_tests": [plain_values(t.model_dump(mode="json")) for t in analysis.finding_tests],
        "telemetry": run.info.telemetry or None,
        "precision": analysis.precision,
        "report_html": str(html_path),
        "serving": analysis.serving,
        **diagnosis_workload_keys(run.requests),
    }


def _render_workload(keys: dict[str, Any]) -> None:
    """Commit length per category, loops and prefix-cache evidence, after the report."""
    if keys["by_category"]:
        out_console.print(category_rich_table(keys["by_category"]))
    if keys["repetition_loops"]:
        out_console.print(f"repetition loops: {len(keys['repetition_loops'])} request(s) end in a "
                          "loop; their acceptance is inflated", markup=False, highlight=False)
    if keys["prefix_cache"]:
        pc = keys["prefix_cache"]
        out_console.print(f"prefix cache: {pc['hits']} hit(s) of {pc['requests']}: {pc['evidence']}",
                          markup=False, highlight=False)


def _fail_target(message: str, json_: bool) -> NoReturn:
    """Nothing could be measured: one line on stderr (and, with --json, the contract's object
    with null numbers and the error), exit 1."""
    err_console.print(labelled("error:", "bold red", message), highlight=False)
    if json_:
        print_json({**dict.fromkeys(("decode_tps", "ttft_s", "mean_commit_len", "mean_step_s",
                                     "attribution", "breakeven", "run_dir", "serving",
                                     "precision")), "findings": [],
                    "error": message})
    raise typer.Exit(EXIT_TARGET_MISBEHAVED)


@contextlib.contextmanager
def _server(url: str | None, args: dict[str, Any]) -> Iterator[str]:
    """The URL to diagnose: the given one, or the embedded default started for this run (its
    log file and /metrics become server evidence automatically)."""
    if url:
        yield url
        return
    run_dir = Path(args["out"])
    run_dir.mkdir(parents=True, exist_ok=True)
    log_file = run_dir / "server.log"
    with support.embedded_server(scenario=args.get("scenario"), time_scale=args.get("time_scale"),
                                 backend=args.get("backend"), log_file=log_file) as (base, desc, notes):
        err_console.print(untrusted(f"embedded server: {desc} at {base}"), highlight=False)
        for n in notes:
            err_console.print(untrusted(f"note: {n}"), highlight=False)
        args["embedded"] = desc
        args["embedded_notes"] = notes
        args["logs"] = [*(args.get("logs") or []), str(log_file)]
        args["metrics_url"] = args.get("metrics_url") or base + "/metrics"
        yield base


def diagnose(
    url: Annotated[str | None, typer.Argument(help="Server URL; omit to diagnose the embedded default")] = None,
    baseline: Annotated[Path | None, typer.Option(help="A baseline run dir for attribution")] = None,
    logs: Annotated[list[str] | None, typer.Option(help="Server log file(s) to read")] = None,
    logs_cmd: Annotated[str | None, typer.Option(help="Command printing server logs (no shell)")] = None,
    metrics_url: Annotated[str | None, typer.Option(help="Prometheus /metrics URL")] = None,
    prompt_tokens: Annotated[int | None, typer.Option(
        help=f"Prompt length of the user's case (default {DEFAULT_PROMPT_TOKENS}, or "
             "--prompt-file's length)", show_default=False)] = None,
    max_tokens: Annotated[int, typer.Option(help="Generation length of the user's case")] = 1500,
    quick: Annotated[bool, typer.Option(
        "--quick", help="A one-minute plan (then --precision repeats within --budget-s)")] = False,
    out: Annotated[Path | None, typer.Option(help="Run directory")] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
    flavor: Annotated[str, typer.Option(help="auto|openai|sglang|vllm|llamacpp")] = "auto",
    api: Annotated[str | None, typer.Option(help="completions|chat|native")] = None,
    repeat: Annotated[int, typer.Option(help="Repeat each measurement K times")] = 1,
    precision: Annotated[float | None, typer.Option(
        help="Repeat the full generation until decode tps' 95% interval (over requests) is "
             "within +-P (relative, e.g. 0.05) or the budget is spent; 0: off (default "
             f"{diagnosis_plan.DEFAULT_PRECISION[True]} with --quick, "
             f"{diagnosis_plan.DEFAULT_PRECISION[False]} without)", show_default=False)] = None,
    budget_s: Annotated[float | None, typer.Option(
        help="Seconds the --precision repeats may add to the plan (default "
             f"{diagnosis_plan.DEFAULT_BUDGET_S[True]:.0f} with --quick, "
             f"{diagnosis_plan.DEFAULT_BUDGET_S[False]:.0f} without)", show_default=False)] = None,
    budget_tokens: Annotated[int | None, typer.Option(
        help="Generated tokens the --precision repeats may add (default: no limit)",
        show_default=False)] = None,
    concurrency: Annotated[str | None, typer.Option(help="Add a concurrency sweep, e.g. 1,2,4")] = None,
    scenario: Annotated[str | None, typer.Option(help="Embedded twin scenario (name or TOML)")] = None,
    time_scale: Annotated[float | None, typer.Option(help="Embedded twin time scale (<1: faster)")] = None,
    backend: Annotated[str | None, typer.Option(help="Embedded backend: engine|twin (default: engine if it works)")] = None,
    logs_timeout: Annotated[float, typer.Option(help="Seconds --logs-cmd may run")] = 30.0,
    api_key: Annotated[str | None, typer.Option(envvar="SPECSCOPE_API_KEY", help="Bearer token (never written)")] = None,
    slo: Annotated[str | None, typer.Option(help=SLO_HELP)] = None,
    model: Model = None,
    tokenizer: Tokenizer = None,
    prompt_file: PromptFile = None,
    workload: Annotated[str | None, typer.Option(
        help="Prompts: mixed (default: the main experiments use its first category, then one "
             "request per category), a category name, synthetic, or a JSONL FILE")] = None,
    vary_prompts: Annotated[bool, typer.Option(
        "--vary-prompts/--same-prompt",
        help="Start every prompt with a per-run reference so no two requests share a prefix; "
             "--same-prompt sends the same prompt text to every request (lets a prefix cache "
             "hit)")] = True,
    timeout_connect: TimeoutConnect = Timeouts.connect,
    timeout_first_byte: TimeoutFirstByte = Timeouts.first_byte,
    timeout_between_chunks: TimeoutBetweenChunks = Timeouts.between_chunks,
    timeout_total: TimeoutTotal = Timeouts.total,
) -> None:
    slo_s = slo_option(slo)
    endpoint = endpoint_or_fail(url) if url is not None else None
    url = endpoint.url if endpoint is not None else None
    timeouts = timeouts_or_fail(timeout_connect, timeout_first_byte, timeout_between_chunks,
                                timeout_total)
    local_count = tokenizer_or_fail(tokenizer)
    prompt_text = prompt_text_or_fail(prompt_file)
    if prompt_tokens is None and prompt_text is None:
        prompt_tokens = DEFAULT_PROMPT_TOKENS
    if prompt_tokens is not None:  # else: --prompt-file's length, counted by the server
        prompt_tokens_or_fail(prompt_tokens)
    if max_tokens < 2:
        fail_usage(f"--max-tokens must be >= 2 (got {max_tokens})")
    if not logs_timeout > 0 or logs_timeout == float("inf"):
        fail_usage(f"--logs-timeout must be a number of seconds > 0 (got {logs_timeout})")
    if not 1 <= repeat <= 100:
        fail_usage(f"--repeat must be within 1..100 (got {repeat})")
    if precision is not None and not 0 <= precision < 1:
        fail_usage(f"--precision must be a relative half-width within [0, 1), e.g. 0.05 "
                   f"(got {precision})")
    if budget_s is not None and not 0 <= budget_s < float("inf"):
        fail_usage(f"--budget-s must be a number of seconds >= 0 (got {budget_s})")
    if budget_tokens is not None and budget_tokens < 0:
        fail_usage(f"--budget-tokens must be >= 0 (got {budget_tokens})")
    if logs and logs_cmd:
        fail_usage("give either --logs or --logs-cmd, not both")
    for p in logs or []:
        if p != "-" and not Path(p).is_file():
            fail_usage(f"--logs: no such file: {p}")
    if time_scale is not None and time_scale <= 0:
        fail_usage(f"--time-scale must be > 0 (got {time_scale})")
    if backend not in (None, "engine", "twin"):
        fail_usage(f"--backend must be engine or twin (got {backend!r})")
    if url is not None and (scenario or time_scale or backend):
        fail_usage("--scenario/--time-scale/--backend apply only to the embedded server (no URL)")
    if scenario is not None:
        from specscope.twin.model import ScenarioError, load_scenario

        try:
            load_scenario(scenario)
        except ScenarioError as e:
            fail_usage(f"--scenario: {e}")
    logs_argv = support.split_command(logs_cmd) if logs_cmd else None
    if logs_cmd and not logs_argv:
        fail_usage(f"--logs-cmd: cannot parse {logs_cmd!r}")
    wl = workload_or_fail(workload, prompt_text, prompt_file)
    baseline_run = None
    if baseline is not None:
        try:
            baseline_run = load_run(baseline)
        except RunDirError as e:
            fail_usage(f"--baseline: {e}")
    run_dir = (out_dir_or_fail(out) if out is not None else
               out_dir_or_fail(RunIndex().home, "the runs home (SPECSCOPE_HOME)")
               / new_run_id("diagnose"))
    args: dict[str, Any] = {
        "prompt_tokens": prompt_tokens, "max_tokens": max_tokens, "quick": quick, "repeat": repeat,
        "flavor": flavor, "api": api, "concurrency_levels": _parse_levels(concurrency),
        "baseline": str(baseline) if baseline else None, "logs": logs, "logs_cmd": logs_argv, "logs_cmd_text": logs_cmd,
        "logs_timeout": logs_timeout, "metrics_url": redact_url(metrics_url) if metrics_url else None,
        "out": str(run_dir), "scenario": scenario, "time_scale": time_scale, "backend": backend,
        "api_key": api_key, "model": model, "tokenizer": str(tokenizer) if tokenizer else None,
        "prompt_file": str(prompt_file) if prompt_file else None,
        "same_prompt": not vary_prompts, "vary_prompts": vary_prompts, "workload": workload,
        "timeouts": {"connect": timeouts.connect, "first_byte": timeouts.first_byte,
                     "between_chunks": timeouts.between_chunks, "total": timeouts.total},
        "slo": slo_s, "precision": precision, "budget_s": budget_s, "budget_tokens": budget_tokens,
    }
    inputs = support.ProbeInputs(timeouts=timeouts, api_key=resolve_api_key(api_key),
                                 auth=endpoint.auth if endpoint else None, model=model,
                                 local_count=local_count, prompt_text=prompt_text,
                                 workload=wl, unique=vary_prompts)

    result = ExecutionResult()
    holder: dict[str, Any] = {}
    interrupted = False
    started = time.monotonic()
    try:
        with _server(url, args) as base_url:
            args["url"] = base_url
            try:
                asyncio.run(_measure(base_url, args, holder, result, show_progress=True,
                                     inputs=inputs))
            except KeyboardInterrupt:
                interrupted = True
                err_console.print("interrupted: keeping what was measured", markup=False)
            except support.TargetError as e:
                if "writer" not in holder:
                    _fail_target(str(e), json_)
                result.stopped_reason = str(e)
            writer: RunDirWriter | None = holder.get("writer")
            if writer is None:
                err_console.print("error: stopped before anything was measured", markup=False)
                raise typer.Exit(EXIT_INTERRUPTED if interrupted else EXIT_TARGET_MISBEHAVED)
            # Evidence is gathered while the (embedded) server still runs: its /metrics and logs.
            try:
                run, analysis, html_path = _finish(writer, result, interrupted, args, baseline_run,
                                                   holder.get("metrics_before"),
                                                   holder.get("precision"))
            except KeyboardInterrupt:
                writer.close("partial", "interrupted (Ctrl-C) while analysing")
                raise typer.Exit(EXIT_INTERRUPTED) from None
    except support.ServerStartError as e:
        _fail_target(f"could not start the embedded server: {e}", json_)
    except KeyboardInterrupt:  # while starting or stopping the embedded server
        w = holder.get("writer")
        if w is not None and w.info.ended_unix is None:
            w.close("partial", "interrupted (Ctrl-C)")
        err_console.print("interrupted", markup=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None

    if json_:
        print_json(contract_json(analysis, run, html_path))
    else:
        render_terminal(context_from_run(run, analysis, str(writer.path)), out_console)
        _render_workload(diagnosis_workload_keys(run.requests))
    err_console.print(f"run dir: {writer.path}", markup=False, highlight=False)
    err_console.print(f"analysis: {writer.path / 'analysis.json'}", markup=False, highlight=False)
    err_console.print(f"HTML report: {html_path}  ({time.monotonic() - started:.0f} s)",
                      markup=False, highlight=False)
    if interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if run.errors or run.info.status != "complete":
        raise typer.Exit(EXIT_TARGET_MISBEHAVED)
    raise typer.Exit(EXIT_OK)


__all__ = ["contract_json", "diagnose", "json"]
