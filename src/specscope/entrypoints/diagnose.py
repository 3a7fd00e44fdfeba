"""`diagnose_run(options)`: the whole diagnose story as a library call.

`diagnose_run(options)` is `specscope diagnose` without flag parsing or rendering: start the
embedded server when no URL is given, detect the target, calibrate, run the plan into one run
directory, attach the server's evidence, analyse, write analysis.json and the reports. The
command parses flags into a `DiagnoseOptions`, passes `DiagnoseHooks` that render (plan,
progress bar, notices), and turns the outcome or the exceptions below into output and an exit
code. Nothing here prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specscope.analysis.diagnosis.verdict import with_partial
from specscope.analysis.result import Analysis
from specscope.analysis.steps.speculation import stated_draft_window
from specscope.embedded import EmbeddedServer, embedded_server
from specscope.entrypoints.options import OptionError, precision_problem
from specscope.experiments import ExecutionResult, Executor, Plan, diagnosis_plan
from specscope.experiments import Progress as StepProgress
from specscope.experiments.precision_loop import (
    PrecisionOutcome,
    expected_repeats_s,
    repeat_until_precise,
)
from specscope.experiments.probe_target import ProbeInputs, TargetError, open_target
from specscope.probe.fleet import Fleet, FleetError
from specscope.probe.health import LoopLagMonitor
from specscope.probe.prompts import prompt_length_problem
from specscope.probe.runners import make_runner, workers_problem
from specscope.probe.workloads import resolve_workload
from specscope.report import context_from_run, write_html, write_markdown
from specscope.store import RunIndex
from specscope.store.analyses import analysis_json, analyze_run
from specscope.telemetry.evidence import (
    EvidenceSources,
    MetricsBefore,
    collect_evidence,
    scrape_before,
)
from specscope.trace import RequestTrace, Run, RunDirWriter, RunInfo, load_run
from specscope.trace.rundir import REPORT_HTML

# A flaky server gets a few tries at the calibration request, a dead one not.
CALIBRATION_ATTEMPTS = 3
DEFAULT_PROMPT_TOKENS = 2700
DEFAULT_MAX_TOKENS = 1500
MAX_TEMPERATURE = 2.0  # the OpenAI API's range, which the servers under test follow


class DiagnoseInputError(ValueError):
    """Input found bad only while running (the run dir cannot be written, --prompt-file's
    length out of range): exit 2 with this message."""


class NothingMeasured(Exception):
    """The run stopped before a run directory existed (`interrupted`: by Ctrl-C)."""

    def __init__(self, interrupted: bool):
        super().__init__("stopped before anything was measured")
        self.interrupted = interrupted


class DiagnoseInterrupted(Exception):
    """Ctrl-C while analysing or while the embedded server started or stopped; the run dir,
    if any, is closed as partial. `announce`: nothing has told the user yet."""

    def __init__(self, announce: bool):
        super().__init__("interrupted")
        self.announce = announce


@dataclass(frozen=True)
class EmbeddedChoice:
    """Which embedded server to start without a URL (--scenario, --time-scale, --backend)."""

    scenario: str | None = None
    time_scale: float | None = None
    backend: str | None = None  # "engine" | "twin" | None (engine when it works)


def logs_command_argv(cmd: str) -> list[str] | None:
    """argv for --logs-cmd (run without a shell); None when it does not parse."""
    try:
        argv = shlex.split(cmd)
    except ValueError:
        return None
    return argv or None


@dataclass(frozen=True)
class DiagnoseOptions:
    """Everything `diagnose_run` needs; building one checks it (OptionError, the message naming
    the flag), for the command and a library caller alike. What needs more than the options
    (the twin scenario file, --prompt-file's text) is the caller's to check.

    `out` is the run directory to create; `url` None starts the embedded server. `recorded`
    holds what is written to run.json as the run's arguments beyond these fields (the paths
    and names the user typed); secrets never go there."""

    out: Path
    url: str | None = None
    prompt_tokens: int | None = DEFAULT_PROMPT_TOKENS  # None: --prompt-file's length
    max_tokens: int = DEFAULT_MAX_TOKENS
    quick: bool = False
    repeat: int = 1
    # False (--no-ignore-eos): requests end at the model's end of turn (no loop past the answer)
    ignore_eos: bool = True
    # --temperature T: every request samples at T (0: greedy). A greedy chat model can loop
    # from its first sentence on long free-form text, and then the loops are all there is to
    # read (docs/dflash.md, the decay study); sampling is what real traffic often asks for
    temperature: float = 0.0
    flavor: str = "auto"
    api: str | None = None
    concurrency_levels: tuple[int, ...] | None = None
    slo: dict[str, float] | None = None
    # --precision P (relative half-width of decode tps' interval; None: the plan's default for
    # --quick or a full run, 0: off) and the budget the repeats may spend
    precision: float | None = None
    budget_s: float | None = None
    budget_tokens: int | None = None
    baseline: Run | None = field(default=None, repr=False)
    baseline_path: str | None = None
    probe: ProbeInputs = field(default_factory=ProbeInputs)
    evidence: EvidenceSources = field(default_factory=EvidenceSources)
    embedded: EmbeddedChoice = field(default_factory=EmbeddedChoice)
    recorded: dict[str, Any] = field(default_factory=dict)
    # time.monotonic() when the command started (None: when diagnose_run is called): the plan's
    # estimate of the whole command and --quick's time bound count from it
    started: float | None = None
    # --workers N / --ray-address: the requests run on N worker processes (probe.runners); 1
    # without an address: on this process' loop, as always
    workers: int = 1
    ray_address: str | None = None

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem:
            raise OptionError(problem)

    def _problem(self) -> str | None:
        """Why these options cannot run (the first reason, in the command's order), or None."""
        ev, emb = self.evidence, self.embedded
        if self.max_tokens < 2:
            return f"--max-tokens must be >= 2 (got {self.max_tokens})"
        if not ev.logs_timeout_s > 0 or ev.logs_timeout_s == float("inf"):
            return f"--logs-timeout must be a number of seconds > 0 (got {ev.logs_timeout_s})"
        if not 0.0 <= self.temperature <= MAX_TEMPERATURE:
            return f"--temperature must be within 0..{MAX_TEMPERATURE:g} (got {self.temperature})"
        if not 1 <= self.repeat <= 100:
            return f"--repeat must be within 1..100 (got {self.repeat})"
        if problem := precision_problem(self.precision, self.budget_s, self.budget_tokens):
            return problem
        if ev.logs and ev.logs_cmd:
            return "give either --logs or --logs-cmd, not both"
        for p in ev.logs:
            if p != "-" and not Path(p).is_file():
                return f"--logs: no such file: {p}"
        if emb.time_scale is not None and emb.time_scale <= 0:
            return f"--time-scale must be > 0 (got {emb.time_scale})"
        if emb.backend not in (None, "engine", "twin"):
            return f"--backend must be engine or twin (got {emb.backend!r})"
        if self.url is not None and (emb.scenario or emb.time_scale or emb.backend):
            return "--scenario/--time-scale/--backend apply only to the embedded server (no URL)"
        if ev.logs_cmd and not logs_command_argv(ev.logs_cmd):
            return f"--logs-cmd: cannot parse {ev.logs_cmd!r}"
        return workers_problem(self.workers, self.ray_address)

    def run_args(self) -> dict[str, Any]:
        """The arguments recorded in run.json (never the API key)."""
        t = self.probe.timeouts
        ev = self.evidence
        return {
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "quick": self.quick,
            "repeat": self.repeat,
            "ignore_eos": self.ignore_eos,
            "temperature": self.temperature,
            "flavor": self.flavor,
            "api": self.api,
            "concurrency_levels": (
                list(self.concurrency_levels) if self.concurrency_levels else None
            ),
            "baseline": self.baseline_path,
            "logs": list(ev.logs) or None,
            "logs_cmd": shlex.split(ev.logs_cmd) if ev.logs_cmd else None,
            "logs_cmd_text": ev.logs_cmd,
            "logs_timeout": ev.logs_timeout_s,
            "metrics_url": ev.metrics_url,
            "out": str(self.out),
            "scenario": self.embedded.scenario,
            "time_scale": self.embedded.time_scale,
            "backend": self.embedded.backend,
            "model": self.probe.model,
            "same_prompt": not self.probe.unique,
            "vary_prompts": self.probe.unique,
            "timeouts": {
                "connect": t.connect,
                "first_byte": t.first_byte,
                "between_chunks": t.between_chunks,
                "total": t.total,
            },
            "slo": self.slo,
            "precision": self.precision,
            "budget_s": self.budget_s,
            "budget_tokens": self.budget_tokens,
            "workers": self.workers,
            "ray_address": self.ray_address,
            **self.recorded,
        }


def _nothing(*_: Any) -> None:
    return None


@dataclass(frozen=True)
class DiagnoseHooks:
    """How a caller watches the run (all optional; the command renders with them)."""

    on_server: Callable[[EmbeddedServer], None] = _nothing  # the embedded server is up
    on_plan: Callable[[Plan, str], None] = _nothing  # the calibrated plan, before it runs
    on_interrupt: Callable[[], None] = _nothing  # Ctrl-C: what was measured is kept
    # A context manager yielding a per-event progress callback for the plan's run.
    progress: Callable[
        [], contextlib.AbstractContextManager[Callable[[StepProgress], None] | None]
    ] = contextlib.nullcontext


@dataclass(frozen=True)
class Diagnosis:
    """What `diagnose_run` produced: the run as saved, its analysis, its directory, the HTML
    report, and whether Ctrl-C cut the run short."""

    run: Run
    analysis: Analysis
    run_dir: Path
    report_html: Path
    interrupted: bool = False


def rates_from(traces: list[RequestTrace]) -> tuple[float | None, float | None]:
    """(decode tok/s, prefill tok/s) from calibration requests, for the plan's estimate."""
    decode: list[float] = []
    prefill: list[float] = []
    for t in traces:
        if t.error is not None:
            continue
        win = t.decode_window()
        if win:
            decode.append(win[0] / win[1])
        if t.ttft_s and t.spec.prompt_tokens:
            prefill.append(t.spec.prompt_tokens / t.ttft_s)
    return (
        sum(decode) / len(decode) if decode else None,
        sum(prefill) / len(prefill) if prefill else None,
    )


@dataclass
class _Measured:
    """Filled while measuring, so that a Ctrl-C (task cancelled) keeps what was measured."""

    result: ExecutionResult = field(default_factory=ExecutionResult)
    writer: RunDirWriter | None = None
    metrics_before: MetricsBefore = None
    precision: PrecisionOutcome | None = None  # the repeat loop's record, when the plan has one
    lag: LoopLagMonitor | None = None  # the client's loop lag, sampled while it measures
    started: float = field(default_factory=time.monotonic)  # the command's start (monotonic)
    fleet: Fleet | None = None  # --workers N: the workers that send (and sample their lag)


def _run_info(
    options: DiagnoseOptions,
    url: str,
    desc: dict[str, Any],
    args: dict[str, Any],
    embedded_notes: list[str],
) -> RunInfo:
    reference = desc.get("prompt_reference")
    return RunInfo(
        kind="diagnose",
        endpoint=url,
        flavor=str(desc.get("flavor") or ""),
        api=str(desc.get("api") or ""),
        model=desc.get("model"),
        server_info=desc.get("server_info") or {},
        args=args,
        notes=[
            *embedded_notes,
            f"workload {desc.get('workload')}; "
            + (
                f"every prompt unique (run reference {reference} first)"
                if reference
                else "--same-prompt: requests share prompts (a prefix cache may serve repeats)"
            ),
        ],
    )


async def _measure(
    url: str,
    options: DiagnoseOptions,
    evidence: EvidenceSources,
    args: dict[str, Any],
    embedded_notes: list[str],
    state: _Measured,
    hooks: DiagnoseHooks,
) -> None:
    """Detect the server, calibrate, announce the plan, then run it (`evidence`: where the
    server's account is read, the embedded server's log and /metrics included)."""
    inputs = options.probe
    workload = inputs.workload or resolve_workload(None)
    async with open_target(url, flavor=options.flavor, api=options.api, inputs=inputs) as target:
        desc = target.describe()
        max_context = desc.get("max_context")
        prompt_tokens = options.prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = await target.count_tokens(inputs.prompt_text or "")
            problem = prompt_length_problem(prompt_tokens)
            if problem:
                raise DiagnoseInputError(problem)
            args["prompt_tokens"] = prompt_tokens
        plan = diagnosis_plan.build(
            prompt_tokens,
            options.max_tokens,
            quick=options.quick,
            repeat=options.repeat,
            max_context=max_context,
            concurrency_levels=(
                list(options.concurrency_levels) if options.concurrency_levels else None
            ),
            categories=None if workload.file_prompts else list(workload.categories),
            precision=options.precision,
            budget_s=options.budget_s,
            budget_tokens=options.budget_tokens,
            draft_window=(stated_draft_window(desc.get("server_info") or {}) or (None,))[0],
        )
        info = _run_info(options, url, desc, args, embedded_notes)
        try:
            writer = RunDirWriter(options.out, info)
        except OSError as e:
            raise DiagnoseInputError(
                f"--out: cannot write a run directory at {options.out}: {e.strerror or e}"
            ) from None
        state.writer = writer
        runner = make_runner(
            target.client,
            options.workers,
            options.ray_address,
            timeouts=inputs.timeouts,
            api_key=inputs.api_key,
            auth=inputs.auth,
            local_count=inputs.local_count,
        )
        state.fleet = runner if isinstance(runner, Fleet) else None
        executor = Executor(
            target,
            writer,
            max_consecutive_errors=3,
            temperature=options.temperature,
            ignore_eos=options.ignore_eos,
            runner=state.fleet,
        )
        state.metrics_before = await scrape_before(evidence.metrics_url)
        state.lag = LoopLagMonitor() if state.fleet is None else None
        try:
            async with state.lag or state.fleet:  # type: ignore[union-attr]
                await _run_plan(executor, plan, prompt_tokens, max_context, state, hooks, url)
        except FleetError as e:  # the workers could not start: nothing was sent
            writer.close("failed", str(e))
            raise DiagnoseInputError(str(e)) from None


async def _run_plan(
    executor: Executor,
    plan: Plan,
    prompt_tokens: int,
    max_context: int | None,
    state: _Measured,
    hooks: DiagnoseHooks,
    url: str,
) -> None:
    """Calibrate, announce the plan, run it (and the precision repeats)."""
    writer = executor.writer
    assert writer is not None
    info = writer.info
    calib = await _calibrate(executor, prompt_tokens, max_context)
    state.result.traces.extend(calib)
    plan.calibrate(*rates_from(calib))
    plan.elapsed_s = time.monotonic() - state.started
    plan.repeats_s = expected_repeats_s(plan)
    info.args["plan"] = plan.to_dict()
    writer.write_info()
    hooks.on_plan(plan, url)
    if calib and all(t.error is not None for t in calib):
        e = calib[0].error
        state.result.stopped_reason = (
            f"the server did not answer a first request ({e.kind}: {e.message})"  # type: ignore[union-attr]
        )
        return
    if plan.precision is not None:
        state.precision = PrecisionOutcome(plan.precision.target)
    with hooks.progress() as on_progress:
        executor.on_progress = on_progress
        await executor.run(plan, state.result)
        if state.precision is not None and state.result.complete:
            await repeat_until_precise(
                executor, plan, state.result, state.precision, started=state.started
            )


async def _calibrate(
    executor: Executor, prompt_tokens: int, max_context: int | None
) -> list[RequestTrace]:
    """The calibration request, tried again where it failed for another reason than time (a
    request that ran out of time would only run out of time again)."""
    calib: list[RequestTrace] = []
    step = diagnosis_plan.calibration_step(prompt_tokens, max_context)
    for _ in range(CALIBRATION_ATTEMPTS):
        calib += await executor.run_step(step)
        last = calib[-1].error
        if last is None or last.kind.startswith("timeout"):
            break
    return calib


def _finish(
    options: DiagnoseOptions, evidence: EvidenceSources, state: _Measured, interrupted: bool
) -> Diagnosis:
    """Close the run, attach server evidence, analyse, write analysis.json and the reports."""
    writer = state.writer
    assert writer is not None
    finished = sum(1 for t in state.result.traces if t.error is None)
    found = collect_evidence(evidence, writer.info.started_unix, state.metrics_before, finished)
    if found.log_window is not None:
        writer.info.telemetry = found.log_window
    if found.records:
        writer.append_telemetry(r.model_dump(mode="json") for r in found.records)
    writer.info.notes.extend(found.notes)
    if state.lag is not None:
        state.lag.stop()
        writer.append_client(state.lag.record())
    if state.fleet is not None:  # --workers: one line per worker, on this process' clock
        for record in state.fleet.records():
            writer.append_client(record)
    if state.precision is not None:
        writer.info.precision = state.precision.closed(
            interrupted=interrupted, stopped_reason=state.result.stopped_reason
        )
    if interrupted:
        writer.close("partial", "interrupted (Ctrl-C)")
    elif state.result.stopped_reason:
        writer.close("partial", state.result.stopped_reason)
    else:
        writer.close("complete")
    run = load_run(writer.path)
    try:
        analysis = analyze_run(run, baseline=options.baseline, telemetry=found.records or None)
    except Exception as e:  # analysis is pure code over our own data: a bug, but keep the run
        analysis = Analysis(
            requests=len(run.requests),
            errors=len(run.errors),
            notes=[f"analysis failed: {e.__class__.__name__}: {e}"],
            verdict=[f"The analysis failed ({e.__class__.__name__}); the measurements are kept."],
        )
    analysis.run_dir = str(writer.path)
    analysis.partial = run.info.status != "complete"
    analysis.verdict = with_partial(analysis.verdict, analysis.partial)
    writer.write_analysis(analysis_json(analysis))
    html_path = writer.path / REPORT_HTML
    ctx = context_from_run(run, analysis, str(writer.path))
    write_html(ctx, html_path)
    write_markdown(ctx, writer.path / "report.md")
    with contextlib.suppress(Exception):  # the index is a cache; never fail a run over it
        RunIndex().add(writer.path)
    return Diagnosis(run, analysis, writer.path, html_path, interrupted)


@contextlib.contextmanager
def _server(
    options: DiagnoseOptions, args: dict[str, Any], hooks: DiagnoseHooks
) -> Iterator[tuple[str, EvidenceSources, list[str]]]:
    """(URL, evidence sources, notes): the given URL, or the embedded default started for this
    run, whose log file and /metrics become evidence automatically."""
    if options.url:
        yield options.url, options.evidence, []
        return
    options.out.mkdir(parents=True, exist_ok=True)
    log_file = options.out / "server.log"
    choice = options.embedded
    with embedded_server(
        scenario=choice.scenario,
        time_scale=choice.time_scale,
        backend=choice.backend,
        log_file=log_file,
    ) as server:
        hooks.on_server(server)
        evidence = replace(
            options.evidence,
            logs=(*options.evidence.logs, str(log_file)),
            metrics_url=options.evidence.metrics_url or server.url + "/metrics",
        )
        args.update(
            embedded=server.description,
            embedded_notes=server.notes,
            logs=list(evidence.logs),
            metrics_url=evidence.metrics_url,
        )
        yield server.url, evidence, server.notes


def diagnose_run(options: DiagnoseOptions, hooks: DiagnoseHooks | None = None) -> Diagnosis:
    """Diagnose the server at `options.url` (or the embedded default) into `options.out`.

    Ctrl-C while measuring keeps what was measured (the Diagnosis says `interrupted`).
    Raises TargetError (nothing could be measured), ServerStartError (the embedded server did
    not come up), probe.preflight.NotOpenAIServer (the URL's server answers but is not an
    OpenAI-compatible one; nothing written), DiagnoseInputError, NothingMeasured,
    DiagnoseInterrupted."""
    hooks = hooks or DiagnoseHooks()
    args = options.run_args()
    state = _Measured(started=options.started or time.monotonic())
    interrupted = False
    try:
        with _server(options, args, hooks) as (url, evidence, embedded_notes):
            args["url"] = url
            try:
                asyncio.run(_measure(url, options, evidence, args, embedded_notes, state, hooks))
            except KeyboardInterrupt:
                interrupted = True
                hooks.on_interrupt()
            except TargetError as e:
                if state.writer is None:
                    raise
                state.result.stopped_reason = str(e)
            if state.writer is None:
                raise NothingMeasured(interrupted)
            # ServerEvidence is gathered while the (embedded) server still runs: its /metrics and logs.
            try:
                return _finish(options, evidence, state, interrupted)
            except KeyboardInterrupt:
                state.writer.close("partial", "interrupted (Ctrl-C) while analysing")
                raise DiagnoseInterrupted(announce=False) from None
    except KeyboardInterrupt:  # while starting or stopping the embedded server
        w = state.writer
        if w is not None and w.info.ended_unix is None:
            w.close("partial", "interrupted (Ctrl-C)")
        raise DiagnoseInterrupted(announce=True) from None
