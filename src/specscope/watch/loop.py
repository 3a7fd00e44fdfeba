"""The watch loop: the canary on its period, one window per interval (the passive readers
read, the window's figures emitted), the detector fed each canary as it ends, alerts handed to
the sink and the alert command. Every fault is an error event and the loop goes on; only the
duration, Ctrl-C (the caller's) or a failed start end it.

The sink receives every event in order (the command renders it: JSON lines or the terminal;
the run directory keeps it). Memory is bounded: the window's samples are dropped once it is
emitted, alerts kept for the summary are capped, the detector keeps deques."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from specscope.analysis.watch.baseline import Baseline
from specscope.analysis.watch.detector import Alert, Detector, DetectorConfig
from specscope.analysis.watch.events import Diagnosis, Start, Summary, WatchError, Window
from specscope.analysis.watch.sample import CanarySample, sample_from_trace
from specscope.analysis.watch.server import server_figures, window_speculation
from specscope.analysis.watch.speedup import PlainReference, speedup
from specscope.analysis.watch.window import window_figures
from specscope.probe.client import new_session
from specscope.report.watch_events import Event, alert_json, event_line
from specscope.telemetry.records import SpecRecord
from specscope.trace.model import RequestTrace
from specscope.watch.alertcmd import run_alert_cmd
from specscope.watch.canary import Canary, start_canary
from specscope.watch.diagnosis import diagnose as run_diagnosis
from specscope.watch.logcmd import LogCommand
from specscope.watch.options import WatchOptions
from specscope.watch.passive import Fault, LogTail, MetricsWatcher

Sink = Callable[[Event], None]
ALERTS_KEPT = 100


def _baseline_view(b: Baseline | None) -> dict[str, Any] | None:
    if b is None:
        return None
    return {
        "commit_len": round(math.exp(b.commit.mean), 4),
        "step_s": round(math.exp(b.step.mean), 6),
        "canaries": b.step.n,
        "source": b.source,
    }


class Watch:
    """One watch. `run()` until the duration ends; after Ctrl-C, `summary(True)`."""

    def __init__(
        self,
        o: WatchOptions,
        sink: Sink,
        baseline: Baseline | None = None,
        clock: Callable[[], float] = time.time,
        plain: PlainReference | None = None,
    ) -> None:
        self.o, self.sink, self.clock = o, sink, clock
        self.plain = plain  # the speedup's reference (a recorded plain run), if any
        self.started = clock()
        config = DetectorConfig(
            warmup_s=o.warmup_s,
            probe_every_s=o.probe_every_s or o.interval_s,
            min_shift=math.log(o.min_shift),
            false_alarms_per_day=o.false_alarms_per_day,
        )
        self.detector = Detector(config, baseline, t0=self.started)
        self.pending: list[CanarySample] = []
        self.pending_errors = 0
        self.counts = {"windows": 0, "canaries": 0, "canary_errors": 0, "errors": 0}
        self.alerts: deque[dict[str, Any]] = deque(maxlen=ALERTS_KEPT)
        self._faults_on: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.server_info: dict[str, Any] = {}
        self.diagnosing = False  # a --diagnose-on-alert run is under way: the canary pauses
        self._window_start = self.started  # the start of the window under way

    def _emit(self, event: Event) -> None:
        if isinstance(event, WatchError):
            self.counts["errors"] += 1
        self.sink(event)

    def summary(self, interrupted: bool = False, run_dir: str | None = None) -> Summary:
        return Summary(
            t=self.clock(),
            started=self.started,
            windows=self.counts["windows"],
            canaries=self.counts["canaries"],
            canary_errors=self.counts["canary_errors"],
            errors=self.counts["errors"],
            alerts=list(self.alerts),
            interrupted=interrupted,
            run_dir=run_dir,
        )

    async def run(self) -> Summary:
        o = self.o
        async with new_session(o.timeouts, None, o.auth) as session:
            canary = await start_canary(session, o)
            self.server_info = canary.server_info
            self._emit(self._start_event())
            readers = await self._readers()
            loops = [self._window_loop(readers)]
            if o.probe_every_s > 0:
                loops.append(self._canary_loop(canary))
            try:
                async with asyncio.timeout(o.duration_s):
                    await asyncio.gather(*loops)
            except TimeoutError:
                await self._last_window(readers)
            finally:
                await self._close(readers)
            await self._drain()
        return self.summary()

    async def _readers(self) -> list[tuple[str, Any]]:
        """The passive readers asked for, the metrics one with its reference scrape taken."""
        o = self.o
        readers: list[tuple[str, Any]] = []
        if o.metrics_url:
            metrics = MetricsWatcher(o.metrics_url)
            await metrics.read()
            readers.append(("metrics", metrics))
        if o.logs is not None:
            readers.append(("logs", LogTail(o.logs)))
        if o.logs_cmd:
            logcmd = LogCommand(o.logs_cmd)
            await logcmd.read()  # started now: its lines from here on
            readers.append(("logs", logcmd))
        return readers

    @staticmethod
    async def _close(readers: list[tuple[str, Any]]) -> None:
        for _, reader in readers:
            closed = getattr(reader, "close", None)
            if closed is not None and inspect.isawaitable(done := closed()):
                await done

    def _start_event(self) -> Start:
        o, b = self.o, self.detector.baseline
        return Start(
            t=self.started,
            url=o.url,
            probe_every_s=o.probe_every_s or None,
            interval_s=o.interval_s,
            prompt_tokens=o.prompt_tokens,
            max_tokens=o.max_tokens,
            budget_tokens_per_hour=o.budget_tokens_per_hour,
            warmup_s=o.warmup_s,
            baseline="warm-up" if b is None else b.source,
            false_alarms_per_day=o.false_alarms_per_day,
            min_shift=o.min_shift,
            plain_baseline=self.plain,
        )

    async def _canary_loop(self, canary: Canary) -> None:
        """One canary at a time, every probe_every_s (late ones do not bunch up)."""
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            if not self.diagnosing:
                trace = await canary.send()
                self._on_trace(trace, canary.max_commit_len)
            due += self.o.probe_every_s
            if due < loop.time():
                due = loop.time()
            await asyncio.sleep(due - loop.time())

    def _on_trace(self, trace: RequestTrace, cap: int | None) -> None:
        t = self.clock()
        self.counts["canaries"] += 1
        if trace.error is not None:
            self.counts["canary_errors"] += 1
            self.pending_errors += 1
            self._emit(WatchError(t, "canary", trace.error.kind, trace.error.message))
            return
        sample = sample_from_trace(trace, t, cap)
        if sample is None:
            self._emit(
                WatchError(
                    t, "canary", "too_few_steps", "the canary streamed too few steps to read"
                )
            )
            return
        self.pending.append(sample)
        for event in self.detector.observe(sample):
            self._emit(event)
            if isinstance(event, Alert):
                self.alerts.append(alert_json(event))
                if self.o.alert_cmd:
                    self._spawn(self._alert_cmd(event))
                if self.o.diagnose_on_alert and not self.diagnosing:
                    self.diagnosing = True
                    self._spawn(self._diagnose(event))

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _diagnose(self, a: Alert) -> None:
        """--diagnose-on-alert: the canary pauses while the diagnosis runs."""
        out = None
        if self.o.out is not None:
            out = self.o.out / f"diagnose-{a.factor}-{int(a.t)}"
        try:
            done = await run_diagnosis(self.o.url, out)
        finally:
            self.diagnosing = False
        self._emit(
            Diagnosis(
                self.clock(), a.factor, done.run_dir, done.exit_code, done.cause, done.message
            )
        )

    async def _alert_cmd(self, a: Alert) -> None:
        problem = await run_alert_cmd(
            self.o.alert_cmd, event_line(a) + "\n", self.o.alert_timeout_s
        )
        if problem is not None:
            self._emit(WatchError(self.clock(), "alert_cmd", "alert_cmd_failed", problem))

    async def _drain(self) -> None:
        """Let running alert commands finish (each has its own timeout)."""
        if self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _window_loop(self, readers: list[tuple[str, Any]]) -> None:
        """A window every interval_s: the passive readers read, then the window emitted."""
        loop = asyncio.get_running_loop()
        due, self._window_start = loop.time(), self.clock()
        while True:
            due += self.o.interval_s
            await asyncio.sleep(max(0.0, due - loop.time()))
            records = await self._read_passive(readers)
            end = self.clock()
            self._emit(self._window(self._window_start, end, records))
            self._window_start = end

    async def _read_passive(self, readers: list[tuple[str, Any]]) -> list[SpecRecord]:
        """Each (source, reader) pair's `read()`, awaited when it is a coroutine; its faults
        recorded."""
        records: list[SpecRecord] = []
        for source, reader in readers:
            got = reader.read()
            got, faults = await got if inspect.isawaitable(got) else got
            records += got
            self._faults(source, faults)
        return records

    async def _last_window(self, readers: list[tuple[str, Any]]) -> None:
        """At the end of --duration, the window under way when a canary ended in it (else
        that canary would be measured and never reported); a shorter window than the rest."""
        if self.pending or self.pending_errors:
            records = await self._read_passive(readers)
            self._emit(self._window(self._window_start, self.clock(), records))

    def _faults(self, source: str, faults: list[Fault]) -> None:
        """Record each fault when it starts (a scrape failing every window is one event until
        a read succeeds again; a restart or a rotation is an event each time)."""
        kinds = {(source, k) for k, _ in faults}
        for kind, message in faults:
            persistent = kind in ("scrape_failed", "log_unreadable")
            if persistent and (source, kind) in self._faults_on:
                continue
            self._emit(WatchError(self.clock(), source, kind, message))
        self._faults_on = {f for f in self._faults_on if f[0] != source} | kinds

    def _window(self, start: float, end: float, records: list[SpecRecord]) -> Window:
        samples, self.pending = self.pending, []
        errors, self.pending_errors = self.pending_errors, 0
        self.counts["windows"] += 1
        state = window_speculation(self.server_info, samples, records)
        figures = window_figures(samples)
        return Window(
            t=end,
            start=start,
            end=end,
            state=self.detector.state,
            figures=figures,
            canary_errors=errors,
            speculation=state.label,
            speculation_reason=state.reason,
            server=server_figures(records),
            cusum=self.detector.statistics(),
            baseline=_baseline_view(self.detector.baseline),
            speedup=None if self.plain is None else speedup(figures, self.plain),
        )
