"""`probe_run(options)`: `specscope probe` without flag parsing or rendering.

Detects the flavor, builds prompts of an exact token length from the workload, streams
`n_requests` requests (at most `concurrency` in flight), appends each finished request to the
run directory, and writes summary.json. A server that does not answer at all is recorded as a
failed request 0 (kind `connection`), so every probe leaves a run directory behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from specscope.analysis.headline import precision
from specscope.analysis.serving import serving_metrics
from specscope.analysis.summary import summarize
from specscope.entrypoints.options import OptionError, precision_problem, timeouts_problem
from specscope.experiments.diagnosis_plan import DEFAULT_BUDGET_S, MAX_PRECISION_REQUESTS
from specscope.experiments.precision_loop import PrecisionOutcome, repeat_rounds
from specscope.probe.client import Timeouts, new_session
from specscope.probe.connect import FlavorError, connect, detect_server
from specscope.probe.flavors import FLAVORS
from specscope.probe.fleet import FleetError
from specscope.probe.prompts import BuiltPrompt, prompt_length_problem
from specscope.probe.runners import make_runner, workers_problem
from specscope.probe.workload import MAX_CONCURRENCY
from specscope.probe.workloads import PromptSource, Workload, resolve_workload
from specscope.telemetry.evidence import (
    EvidenceSources,
    MetricsBefore,
    collect_evidence,
    scrape_before,
)
from specscope.telemetry.records import SpecRecord
from specscope.telemetry.server_info import max_commit_len_from
from specscope.trace import tags
from specscope.trace.model import ErrorInfo, RequestSpec, RequestTrace, RunInfo
from specscope.trace.rundir import RunDirWriter

SUMMARY_JSON = "summary.json"
DEFAULT_PROBE_TOKENS = 256
# probe --precision P: seconds the repeats may add when --budget-s is not given (a quick
# diagnosis' default)
PRECISION_BUDGET_S = DEFAULT_BUDGET_S[True]
# requests one probe may send (--repeat x --concurrency)
MAX_REQUESTS = 100_000
APIS = ("completions", "chat", "native")


class ProbeInputError(ValueError):
    """Input found bad only once the server answered (no way to count prompt tokens, a shape
    beyond its context, an api its flavor does not serve, an unwritable --out): exit 2."""


@dataclass(frozen=True)
class ProbeOptions:
    """What `probe_run` sends and where it writes; building one checks it (OptionError, the
    message naming the flag), for the command and a library caller alike. What needs more than
    the options (the URL's parse, --tokenizer, --prompt-file, --workload, --out) is the
    caller's to check. `recorded` is written to run.json as the run's arguments (never the API
    key)."""

    url: str
    flavor: str = "auto"
    api: str | None = None
    model: str | None = None
    prompt_tokens: int = DEFAULT_PROBE_TOKENS
    max_tokens: int = DEFAULT_PROBE_TOKENS
    n_requests: int = 1
    concurrency: int = 1
    # --repeat: requests per concurrency slot; when given, n_requests is repeat x concurrency
    # (and the refusals name --repeat)
    repeat: int | None = None
    ignore_eos: bool = True
    out: Path | None = None  # None: a new run dir under the runs home
    timeouts: Timeouts = field(default_factory=Timeouts)
    api_key: str | None = field(default=None, repr=False)
    auth: aiohttp.BasicAuth | None = field(default=None, repr=False)
    local_count: Callable[..., int] | None = None  # --tokenizer
    workload: Workload = field(default_factory=lambda: resolve_workload(None))
    unique: bool = True  # False: --same-prompt
    max_commit_len: int | None = None
    slo: dict[str, float] | None = None
    # --precision P (> 0): after the n_requests, more until decode tps' 95% interval is within
    # +-P (relative) or the budget (seconds, generated tokens) is spent; 0: the requests only
    precision: float = 0.0
    budget_s: float | None = None  # None: PRECISION_BUDGET_S
    budget_tokens: int | None = None
    recorded: dict[str, Any] = field(default_factory=dict)
    # the server's Prometheus /metrics: scraped before and after the requests, its run delta
    # kept in the run's telemetry and read by the headline (None: not scraped)
    metrics_url: str | None = None
    # --workers N: the load runs as N worker processes, one event loop each (probe.fleet); 1:
    # on this process' loop, as always
    workers: int = 1
    # --ray-address: the workers are Ray actors of that cluster ("local": a private one)
    ray_address: str | None = None

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem:
            raise OptionError(problem)
        if self.repeat is not None:
            object.__setattr__(self, "n_requests", self.repeat * self.concurrency)

    def _problem(self) -> str | None:
        """Why these options cannot run (the first reason, in the command's order), or None."""
        if problem := prompt_length_problem(self.prompt_tokens):
            return problem
        if self.flavor != "auto" and self.flavor not in FLAVORS:
            return f"--flavor must be auto or one of {', '.join(FLAVORS)}, got {self.flavor!r}"
        if self.api is not None and self.api not in APIS:
            return f"--api must be completions, chat or native, got {self.api!r}"
        if problem := self._shape_problem():
            return problem
        if self.max_commit_len is not None and self.max_commit_len < 1:
            return f"--max-commit-len must be >= 1, got {self.max_commit_len}"
        if problem := precision_problem(self.precision, self.budget_s, self.budget_tokens):
            return problem
        if problem := workers_problem(self.workers, self.ray_address, self.concurrency):
            return problem
        return timeouts_problem(self.timeouts)

    def _shape_problem(self) -> str | None:
        """--max-tokens, --repeat (or n_requests) and --concurrency within their ranges."""
        for name, value in (
            ("--max-tokens", self.max_tokens),
            ("--repeat", 1 if self.repeat is None else self.repeat),
            ("--concurrency", self.concurrency),
        ):
            if value < 1:
                return f"{name} must be >= 1, got {value}"
        if self.concurrency > MAX_CONCURRENCY:
            return f"--concurrency must be <= {MAX_CONCURRENCY}, got {self.concurrency}"
        if self.repeat is None:
            if not 1 <= self.n_requests <= MAX_REQUESTS:
                return f"n_requests must be within 1..{MAX_REQUESTS}, got {self.n_requests}"
        elif self.repeat * self.concurrency > MAX_REQUESTS:
            return (
                f"--repeat x --concurrency must be <= {MAX_REQUESTS}, "
                f"got {self.repeat * self.concurrency}"
            )
        return None


@dataclass
class ProbeOutcome:
    """The saved run: where, what was detected, every trace, the summary and serving figures."""

    run_dir: Path
    info: RunInfo
    traces: list[RequestTrace]
    summary: dict[str, Any]
    detection: str
    notes: list[str] = field(default_factory=list)
    serving: dict[str, Any] | None = None
    # --precision: what the repeats aimed for, reached and spent (analysis.precision.summary)
    precision: dict[str, Any] | None = None
    interrupted: bool = False  # Ctrl-C: the run is partial, its figures what was measured


def _no_progress(_total: int) -> contextlib.AbstractContextManager[Callable[[RequestTrace], None]]:
    return contextlib.nullcontext(lambda _trace: None)


# Given the number of requests, a context manager yielding a callback per finished request.
ProgressHook = Callable[[int], contextlib.AbstractContextManager[Callable[[RequestTrace], None]]]


def context_problem(prompt_tokens: int, max_tokens: int, max_context: int | None) -> str | None:
    """Why this request shape cannot run on a server of `max_context` tokens (None: it can)."""
    if max_context is not None and prompt_tokens + max_tokens > max_context:
        return (
            f"--prompt-tokens {prompt_tokens} + --max-tokens {max_tokens} exceeds the "
            f"server's context of {max_context} tokens"
        )
    return None


def workload_note(
    workload: Workload, built: list[BuiltPrompt], n_prompt: int, source: PromptSource
) -> str:
    """What was sent: the workload, how the cuts fell, and how prompts were kept unique."""
    cuts = Counter(b.boundary for b in built)
    inexact = [b for b in built if not b.exact]
    note = f"workload {workload.describe()}; cuts: " + ", ".join(
        f"{k} {v}" for k, v in cuts.most_common()
    )
    if inexact:
        note += (
            f"; {len(inexact)} prompts could not be made exactly {n_prompt} tokens "
            f"(closest {inexact[0].tokens}); their true length is recorded"
        )
    if source.unique:
        note += f"; every prompt unique (run reference {source.nonce} first)"
    else:
        note += "; --same-prompt: every request sends the same prompt (a prefix cache may serve repeats)"
    return note


def _writer(out: Path | None, info: RunInfo) -> RunDirWriter:
    try:
        return RunDirWriter(out, info)
    except OSError as e:
        raise ProbeInputError(
            f"--out: cannot write a run directory at {out}: {e.strerror or e}"
        ) from None


def _unreachable(o: ProbeOptions, info: RunInfo, error: str | None, evidence: str) -> ProbeOutcome:
    """The failed detection as request 0, so the run says what happened."""
    info.api = o.api or ""
    writer = _writer(o.out, info)
    spec = RequestSpec(
        prompt="",
        max_tokens=o.max_tokens,
        ignore_eos=o.ignore_eos,
        tag=tags.make(tags.PROBE, "detect"),
    )
    now = time.perf_counter_ns()
    trace = RequestTrace(
        index=0,
        spec=spec,
        t_send_ns=now,
        t_end_ns=now,
        error=ErrorInfo(kind="connection", message=f"server not reachable: {error}"),
    )
    writer.append_request(trace)
    writer.close("failed", f"server not reachable: {error}")
    return ProbeOutcome(
        writer.path,
        info,
        [trace],
        summarize([trace]),
        evidence,
        serving=serving_metrics([trace], slo=o.slo),
    )


async def probe_run(o: ProbeOptions, progress: ProgressHook = _no_progress) -> ProbeOutcome:
    """Probe the server at `o.url`. Raises ProbeInputError (exit 2), NotOpenAIServer (the
    preflight: the server answers but is not an OpenAI-compatible one; nothing written),
    TokenizeError (the server's tokenizer misbehaved) and PromptError (a prompt could not be
    built)."""
    async with new_session(o.timeouts, o.api_key, o.auth) as session:
        det = await detect_server(session, o.url, o.flavor, o.timeouts)
        info = RunInfo(
            kind="probe",
            endpoint=o.url,
            flavor=det.flavor,
            model=o.model or det.model,
            server_info=det.server_info,
            args=o.recorded,
        )
        if not det.reachable:
            return _unreachable(o, info, det.error, det.evidence)
        # Prompts: the server's tokenizer when it has one, else the local one, else an error.
        try:
            conn = await connect(
                session,
                o.url,
                det,
                api=o.api,
                model=o.model,
                timeouts=o.timeouts,
                local_count=o.local_count,
            )
        except FlavorError as e:
            raise ProbeInputError(str(e)) from None
        flavor = conn.flavor
        info.api = flavor.api
        notes: list[str] = [f"flavor {flavor.name}: {det.evidence}"]
        max_commit_len = o.max_commit_len
        if max_commit_len is None:
            max_commit_len = max_commit_len_from(det.server_info)
            if max_commit_len is not None:
                notes.append(f"max commit length {max_commit_len} (from the server's info)")
        workload = o.workload
        if not workload.file_prompts:
            too_long = context_problem(o.prompt_tokens, o.max_tokens, det.max_context)
            if too_long:
                raise ProbeInputError(too_long)
        if conn.count is None and not workload.file_prompts:
            tried = ", ".join(f"POST {p} {{{k!r}: ...}}" for p, k in flavor.tokenize_endpoints)
            raise ProbeInputError(
                f"{o.url} has no tokenize endpoint (tried {tried}); pass "
                "--tokenizer PATH (a local tokenizer.json of the served "
                "model), --prompt-file or a --workload FILE"
            )
        source = PromptSource(conn.count, workload, unique=o.unique)
        built = await source.prompts(o.prompt_tokens, o.n_requests)
        notes.append(workload_note(workload, built, o.prompt_tokens, source))
        if conn.count is not None:
            notes.append(f"prompt tokens counted by {conn.count_source}")
        info.notes = notes
        writer = _writer(o.out, info)

        def spec(b: BuiltPrompt) -> RequestSpec:
            return RequestSpec(
                prompt=(b.messages if b.messages is not None and flavor.api == "chat" else b.text),
                prompt_tokens=b.tokens,
                max_tokens=o.max_tokens,
                temperature=0.0,
                ignore_eos=o.ignore_eos,
                api=flavor.api,  # type: ignore[arg-type]
                tag=tags.PROBE,
                category=b.category,
            )

        measured: list[RequestTrace] = []  # every finished request, in the order they ended
        repeats = PrecisionOutcome(o.precision) if o.precision > 0 else None
        status, reason, interrupted = "partial", "interrupted", True
        runner = make_runner(
            conn.client(session, o.timeouts),
            o.workers,
            o.ray_address,
            timeouts=o.timeouts,
            api_key=o.api_key,
            auth=o.auth,
            local_count=o.local_count,
        )
        metrics_before = await scrape_before(o.metrics_url)
        try:
            async with runner:

                async def send(specs: list[RequestSpec]) -> None:
                    with progress(len(specs)) as on_progress:

                        def on_done(trace: RequestTrace) -> None:
                            writer.append_request(trace)
                            measured.append(trace)
                            on_progress(trace)

                        await runner.run(specs, o.concurrency, on_done, len(measured))

                await send([spec(b) for b in built])
                if repeats is not None:
                    await _repeat_until_precise(o, source, spec, send, measured, repeats)
            failed = sum(1 for t in measured if t.error is not None)
            status, interrupted = "complete", False
            reason = f"{failed} of {len(measured)} requests failed" if failed else ""
        except asyncio.CancelledError:
            # Ctrl-C (asyncio.run cancels this task): the requests in flight were handed over
            # as cancelled; what was measured is summarised below, as diagnose does
            reason = "interrupted (Ctrl-C)"
        except FleetError as e:  # the workers could not start: nothing was sent
            status, reason = "failed", str(e)
            raise ProbeInputError(reason) from None
        finally:
            client_samples = runner.records()
            for record in client_samples:
                writer.append_client(record)
            ok = sum(1 for t in measured if t.error is None)
            telemetry = _server_metrics(o.metrics_url, writer, metrics_before, ok)
            if repeats is not None:
                info.precision = repeats.closed(interrupted=interrupted, stopped_reason=None)
            writer.close(status, reason)  # type: ignore[arg-type]
        traces = sorted(measured, key=lambda t: t.index)
        summary = summarize(
            traces,
            max_commit_len=max_commit_len,
            server_info=info.server_info,
            client=client_samples,
            telemetry=telemetry,
        )
        serving = serving_metrics(
            traces, run_concurrency=o.concurrency, slo=o.slo, max_commit_len=max_commit_len
        )
        try:
            (writer.path / SUMMARY_JSON).write_text(
                json.dumps({"schema": 1, "summary": summary, "serving": serving}, indent=2) + "\n"
            )
        except OSError as e:
            notes.append(f"could not write {SUMMARY_JSON}: {e}")
        reached = precision.summary(
            info.precision,
            summary.get("decode_tps"),
            summary.get("decode_tps_ci"),
            summary.get("ok") or 0,
        )
        return ProbeOutcome(
            writer.path, info, traces, summary, det.evidence, notes, serving, reached, interrupted
        )


def _server_metrics(
    url: str | None, writer: RunDirWriter, before: MetricsBefore, finished: int
) -> list[SpecRecord]:
    """The server's Prometheus run delta (`--metrics-url`), kept in the run's telemetry, its
    note in run.json's notes; nothing without a URL. A failed scrape is a note, not an error:
    the requests are measured and saved already. `finished`: the run's successful requests,
    which the server's counters are given time to count."""
    if not url:
        return []
    sources = EvidenceSources(metrics_url=url)
    found = collect_evidence(sources, writer.info.started_unix, before, finished)
    if found.records:
        writer.append_telemetry(r.model_dump(mode="json") for r in found.records)
    writer.info.notes.extend(found.notes)
    return list(found.records)


async def _repeat_until_precise(
    o: ProbeOptions,
    source: PromptSource,
    spec: Callable[[BuiltPrompt], RequestSpec],
    send: Callable[[list[RequestSpec]], Awaitable[None]],
    measured: list[RequestTrace],
    out: PrecisionOutcome,
) -> None:
    """--precision: more of the probe's requests (new prompts, the same shape) until decode tps'
    interval is narrow enough or the budget is spent (the loop diagnose's repeats run)."""
    out.budget_s = PRECISION_BUDGET_S if o.budget_s is None else o.budget_s
    out.budget_tokens = o.budget_tokens

    async def send_more(n: int) -> str | None:
        built = await source.prompts(o.prompt_tokens, n, start=len(measured))
        await send([spec(b) for b in built])
        return None

    await repeat_rounds(
        lambda: measured,
        send_more,
        out,
        budget=precision.Budget(
            out.budget_s, out.budget_tokens, max(MAX_PRECISION_REQUESTS, o.n_requests)
        ),
        tokens_per_request=o.max_tokens,
    )
