"""`specscope diagnose [URL]`: reproduce, measure two ways, read the server, explain the gap.

The seed story in one command: the user's full generation, a two-point pair, a context sweep and
an output sweep go into one run dir; server evidence (logs, a Prometheus delta) is attached;
analysis explains the number; the report is printed and written (analysis.json, report.html).
Without URL the embedded default server is started on loopback, diagnosed, and stopped.

Exit codes: 0 ok; 1 the target misbehaved (failed requests, server died; what was measured is
still reported); 2 bad usage/input, a URL whose server answers but is not an OpenAI-compatible
one included (probe.preflight; no run directory). Ctrl-C stops cleanly and reports a partial run (exit 130).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from specscope.analysis.workload.keys import diagnosis_workload_keys
from specscope.commands.common import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TARGET_MISBEHAVED,
    SLO_HELP,
    Verbose,
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
    prompt_tokens_or_fail,
    timeouts_or_fail,
    tokenizer_or_fail,
    workload_or_fail,
)
from specscope.embedded import ServerStartError
from specscope.entrypoints import (
    DEFAULT_PROMPT_TOKENS,
    DiagnoseHooks,
    DiagnoseInputError,
    DiagnoseInterrupted,
    DiagnoseOptions,
    Diagnosis,
    EmbeddedChoice,
    NothingMeasured,
    OptionError,
    diagnose_run,
)
from specscope.experiments import diagnosis_plan
from specscope.experiments.probe_target import ProbeInputs, TargetError
from specscope.probe.client import Timeouts, resolve_api_key
from specscope.probe.endpoint import Endpoint, redact_url
from specscope.probe.preflight import NotOpenAIServer
from specscope.report import context_from_run, render_plan, render_terminal
from specscope.report.contract import diagnose_failure_json, diagnose_json
from specscope.report.notices import (
    render_embedded_server,
    render_interrupted,
    render_run_written,
)
from specscope.report.probe_terminal import render_workload
from specscope.report.progress import PlanProgressBar
from specscope.report.text import labelled
from specscope.store import RunIndex
from specscope.telemetry.evidence import EvidenceSources
from specscope.trace import Run, load_run
from specscope.trace.rundir import RunDirError, new_run_id


def _parse_levels(text: str | None) -> tuple[int, ...] | None:
    """--concurrency 1,2,4 as levels within 1..256, or exit 2."""
    if not text:
        return None
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail_usage(f"--concurrency expects comma-separated integers like 1,2,4 (got {text!r})")
    if not levels or any(c < 1 or c > 256 for c in levels):
        fail_usage(f"--concurrency levels must be within 1..256 (got {text!r})")
    return tuple(levels)


def _hooks(show_progress: bool) -> DiagnoseHooks:
    """What the terminal shows while the run goes (report.notices, report.progress): the
    embedded server, the plan, a progress bar on stderr, and a line on Ctrl-C."""
    return DiagnoseHooks(
        on_server=lambda server: render_embedded_server(
            server.description, server.url, server.notes, err_console
        ),
        on_plan=lambda plan, url: render_plan(plan, err_console, url),
        on_interrupt=lambda: render_interrupted(err_console),
        progress=lambda: PlanProgressBar(err_console, show_progress),
    )


def _fail_target(message: str, json_: bool, exit_code: int = EXIT_TARGET_MISBEHAVED) -> NoReturn:
    """Nothing could be measured: one line on stderr (and, with --json, the contract's object
    with null numbers and the error: the one object on stdout), exit 1 (2: the URL's server
    is not an OpenAI-compatible one)."""
    err_console.print(labelled("error:", "bold red", message), highlight=False)
    if json_:
        print_json(diagnose_failure_json(message))
    raise typer.Exit(exit_code)


def diagnose(
    url: Annotated[
        str | None, typer.Argument(help="Server URL; omit to diagnose the embedded default")
    ] = None,
    baseline: Annotated[
        Path | None, typer.Option(help="A baseline run dir for attribution")
    ] = None,
    logs: Annotated[list[str] | None, typer.Option(help="Server log file(s) to read")] = None,
    logs_cmd: Annotated[
        str | None, typer.Option(help="Command printing server logs (no shell)")
    ] = None,
    metrics_url: Annotated[str | None, typer.Option(help="Prometheus /metrics URL")] = None,
    prompt_tokens: Annotated[
        int | None,
        typer.Option(
            help=f"Prompt length of the user's case (default {DEFAULT_PROMPT_TOKENS}, or "
            "--prompt-file's length)",
            show_default=False,
        ),
    ] = None,
    max_tokens: Annotated[int, typer.Option(help="Generation length of the user's case")] = 1500,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick", help="A one-minute plan (then --precision repeats within --budget-s)"
        ),
    ] = False,
    out: Annotated[Path | None, typer.Option(help="Run directory")] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
    verbose: Verbose = False,
    flavor: Annotated[str, typer.Option(help="auto|openai|sglang|vllm|llamacpp")] = "auto",
    api: Annotated[str | None, typer.Option(help="completions|chat|native")] = None,
    repeat: Annotated[int, typer.Option(help="Repeat each measurement K times")] = 1,
    ignore_eos: Annotated[
        bool,
        typer.Option(
            "--ignore-eos/--no-ignore-eos",
            help="Generate every planned token (the default); --no-ignore-eos ends requests at "
            "the model's end of turn, as real traffic does (a model that stops early "
            "cannot loop past its answer)",
        ),
    ] = True,
    temperature: Annotated[
        float,
        typer.Option(
            help="Sampling temperature of every request (0: greedy, the default); a greedy "
            "model that loops on long free-form text can be read sampled instead"
        ),
    ] = 0.0,
    precision: Annotated[
        float | None,
        typer.Option(
            help="Repeat the full generation until decode tps' 95% interval (over requests) is "
            "within +-P (relative, e.g. 0.05) or the budget is spent; 0: off (default "
            f"{diagnosis_plan.DEFAULT_PRECISION[True]} with --quick, "
            f"{diagnosis_plan.DEFAULT_PRECISION[False]} without)",
            show_default=False,
        ),
    ] = None,
    budget_s: Annotated[
        float | None,
        typer.Option(
            help="Seconds the --precision repeats may add to the plan (default "
            f"{diagnosis_plan.DEFAULT_BUDGET_S[True]:.0f} with --quick, "
            f"{diagnosis_plan.DEFAULT_BUDGET_S[False]:.0f} without)",
            show_default=False,
        ),
    ] = None,
    budget_tokens: BudgetTokens = None,
    concurrency: Annotated[
        str | None, typer.Option(help="Add a concurrency sweep, e.g. 1,2,4")
    ] = None,
    scenario: Annotated[
        str | None, typer.Option(help="Embedded twin scenario (name or TOML)")
    ] = None,
    time_scale: Annotated[
        float | None, typer.Option(help="Embedded twin time scale (<1: faster)")
    ] = None,
    backend: Annotated[
        str | None, typer.Option(help="Embedded backend: engine|twin (default: engine if it works)")
    ] = None,
    logs_timeout: Annotated[float, typer.Option(help="Seconds --logs-cmd may run")] = 30.0,
    api_key: Annotated[
        str | None, typer.Option(envvar="SPECSCOPE_API_KEY", help="Bearer token (never written)")
    ] = None,
    slo: Annotated[str | None, typer.Option(help=SLO_HELP)] = None,
    model: Model = None,
    tokenizer: Tokenizer = None,
    prompt_file: PromptFile = None,
    workload: Annotated[
        str | None,
        typer.Option(
            help="Prompts: mixed (default: the main experiments use its first category, then one "
            "request per category), a category name, synthetic, or a JSONL FILE"
        ),
    ] = None,
    vary_prompts: Annotated[
        bool,
        typer.Option(
            "--vary-prompts/--same-prompt",
            help="Start every prompt with a per-run reference so no two requests share a prefix; "
            "--same-prompt sends the same prompt text to every request (lets a prefix cache "
            "hit)",
        ),
    ] = True,
    timeout_connect: TimeoutConnect = Timeouts.connect,
    timeout_first_byte: TimeoutFirstByte = Timeouts.first_byte,
    timeout_between_chunks: TimeoutBetweenChunks = Timeouts.between_chunks,
    timeout_total: TimeoutTotal = Timeouts.total,
    workers: Workers = 1,
    ray_address: RayAddress = None,
) -> None:
    """Parse and check the flags, run the diagnosis, print the report (or --json's object)."""
    started = time.monotonic()  # the plan's estimate and --quick's bound count from here
    endpoint = endpoint_or_fail(url) if url is not None else None
    slo_s = slo_option(slo)
    inputs = _probe_inputs(
        endpoint,
        api_key=api_key,
        model=model,
        tokenizer=tokenizer,
        prompt_file=prompt_file,
        workload=workload,
        vary_prompts=vary_prompts,
        timeouts=(timeout_connect, timeout_first_byte, timeout_between_chunks, timeout_total),
    )
    if prompt_tokens is None and inputs.prompt_text is None:
        prompt_tokens = DEFAULT_PROMPT_TOKENS
    if prompt_tokens is not None:  # else: --prompt-file's length, counted by the server
        prompt_tokens_or_fail(prompt_tokens)
    if scenario is not None and endpoint is None:  # with a URL the options refuse --scenario
        _scenario_or_fail(scenario)
    baseline_run = _baseline_or_fail(baseline)
    try:
        options = DiagnoseOptions(
            out=_run_dir_or_fail(out),
            url=endpoint.url if endpoint is not None else None,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            quick=quick,
            repeat=repeat,
            ignore_eos=ignore_eos,
            temperature=temperature,
            flavor=flavor,
            api=api,
            concurrency_levels=_parse_levels(concurrency),
            slo=slo_s,
            baseline=baseline_run,
            precision=precision,
            budget_s=budget_s,
            budget_tokens=budget_tokens,
            baseline_path=str(baseline) if baseline else None,
            probe=inputs,
            evidence=EvidenceSources(
                logs=tuple(logs or ()),
                logs_cmd=logs_cmd,
                logs_timeout_s=logs_timeout,
                metrics_url=redact_url(metrics_url) if metrics_url else None,
            ),
            embedded=EmbeddedChoice(scenario=scenario, time_scale=time_scale, backend=backend),
            started=started,
            workers=workers,
            ray_address=ray_address,
            recorded={
                "tokenizer": str(tokenizer) if tokenizer else None,
                "prompt_file": str(prompt_file) if prompt_file else None,
                "workload": workload,
            },
        )
    except OptionError as e:
        fail_usage(str(e))
    _print_outcome(_run(options, json_), json_, started, verbose)


def _probe_inputs(
    endpoint: Endpoint | None,
    *,
    api_key: str | None,
    model: str | None,
    tokenizer: Path | None,
    prompt_file: Path | None,
    workload: str | None,
    vary_prompts: bool,
    timeouts: tuple[float, float, float, float],
) -> ProbeInputs:
    """The probe's input options (the same flags and checks as `probe`), each bad one exit 2."""
    checked_timeouts = timeouts_or_fail(*timeouts)
    local_count = tokenizer_or_fail(tokenizer)
    prompt_text = prompt_text_or_fail(prompt_file)
    return ProbeInputs(
        timeouts=checked_timeouts,
        api_key=resolve_api_key(api_key),
        auth=endpoint.auth if endpoint else None,
        model=model,
        local_count=local_count,
        prompt_text=prompt_text,
        workload=workload_or_fail(workload, prompt_text, prompt_file),
        unique=vary_prompts,
    )


def _scenario_or_fail(scenario: str) -> None:
    """--scenario names a twin scenario that loads (checked before anything starts)."""
    from specscope.twin.scenario import ScenarioError, load_scenario

    try:
        load_scenario(scenario)
    except ScenarioError as e:
        fail_usage(f"--scenario: {e}")


def _baseline_or_fail(baseline: Path | None) -> Run | None:
    """--baseline's run, loaded, or exit 2 naming why it is not a run."""
    if baseline is None:
        return None
    try:
        return load_run(baseline)
    except RunDirError as e:
        fail_usage(f"--baseline: {e}")


def _run_dir_or_fail(out: Path | None) -> Path:
    """--out, or a new run dir under the runs home; exit 2 when it cannot be written."""
    if out is not None:
        return out_dir_or_fail(out)
    home = out_dir_or_fail(RunIndex().home, "the runs home (SPECSCOPE_HOME)")
    return home / new_run_id("diagnose")


def _run(options: DiagnoseOptions, json_: bool) -> Diagnosis:
    """diagnose_run, each of its refusals turned into the contract's exit code and one line."""
    try:
        return diagnose_run(options, _hooks(show_progress=True))
    except TargetError as e:
        _fail_target(str(e), json_)
    except ServerStartError as e:
        _fail_target(f"could not start the embedded server: {e}", json_)
    except DiagnoseInputError as e:
        fail_usage(str(e))
    except NotOpenAIServer as e:  # the preflight: the URL is not an LLM server (exit 2)
        _fail_target(str(e), json_, EXIT_BAD_INPUT)
    except NothingMeasured as e:
        err_console.print(f"error: {e}", markup=False)
        raise typer.Exit(EXIT_INTERRUPTED if e.interrupted else EXIT_TARGET_MISBEHAVED) from None
    except DiagnoseInterrupted as e:
        if e.announce:
            err_console.print("interrupted", markup=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _print_outcome(done: Diagnosis, json_: bool, started: float, verbose: bool) -> NoReturn:
    """The report (or the JSON object) on stdout, where it was written on stderr, and the exit
    code: 130 after Ctrl-C, 1 when the target misbehaved, else 0."""
    run, analysis, html_path, run_path = done.run, done.analysis, done.report_html, done.run_dir
    if json_:
        print_json(diagnose_json(analysis, run, html_path))
    else:
        ctx = context_from_run(run, analysis, str(run_path))
        render_terminal(ctx, out_console, verbose=verbose)
        render_workload(diagnosis_workload_keys(run.requests), out_console, verbose=verbose)
    render_run_written(run_path, html_path, time.monotonic() - started, err_console)
    if done.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if run.errors or run.info.status != "complete":
        raise typer.Exit(EXIT_TARGET_MISBEHAVED)
    raise typer.Exit(EXIT_OK)
