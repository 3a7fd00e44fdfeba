"""Continuous batching: one loop admits waiting requests and steps all running ones together.

Three ways to run that loop, one scheduler: a backend whose step is synchronous (the engine,
`ThreadSteppable`) is stepped by a thread of its own (step_thread.py); a backend that runs its
step loop itself (`OwnsStepLoop`: the engine in a process of its own, engine_process.py) is
handed the requests; either reports each pass to the event loop in one call (a `StepReport`,
requests by id). An async-native backend (the twin, whose step sleeps on its clock) is stepped
by an asyncio task. Either way the counting, the logs and the request events happen here, on
the event loop.

Like SGLang's scheduler: a step's duration depends on the whole batch, new requests join between
steps (prefill first), finished or disconnected requests leave between steps and release what
they hold. The loop also keeps the server-side speculation counters that SGLang reports (per
request: verify count, accepted/proposed drafts, histogram; per interval: the "Decode batch" log
and the Prometheus gauges).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass, field

from specscope.backend import Backend, BackendError, BatchStep, SamplingParams, StepOutput
from specscope.serve.faults import HostFaults, StepWork
from specscope.serve.logs import ServerLog
from specscope.serve.metrics import ServeMetrics
from specscope.serve.step_thread import (
    OwnsStepLoop,
    StepDriver,
    StepReport,
    StepThread,
    ThreadSteppable,
    run_step_work,
)


@dataclass
class StepEvent:
    """Tokens a request committed in one verify step, as delivered to its HTTP handler."""

    tokens: list[int]
    accepted_drafts: int
    finished: bool
    finish_reason: str | None


@dataclass
class ErrorEvent:
    message: str
    status: int


@dataclass
class RequestState:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    t_arrival: float = field(default_factory=time.perf_counter)
    events: asyncio.Queue[StepEvent | ErrorEvent] = field(default_factory=asyncio.Queue)
    completion_tokens: int = 0
    # every token committed, in order, as the scheduler received them: the server's own record,
    # returned as output_ids on the native API's final response (SGLang does the same)
    output_ids: list[int] = field(default_factory=list)
    # the request's output processing in the step loop, where a host fault puts work there
    # (faults.HostFaults.step_work; None: none)
    step_work: StepWork | None = None
    verify_ct: int = 0
    accepted_drafts: int = 0
    proposed_drafts: int = 0
    histogram: list[int] = field(default_factory=list)
    finished: bool = False
    cancelled: bool = False


@dataclass
class _Interval:
    """Counters between two "Decode batch" log lines (SGLang resets them at each print)."""

    steps: int = 0
    forward_ct: int = 0  # per-request verify steps
    accept_tokens: int = 0
    accepted: int = 0
    proposed: int = 0
    tokens: int = 0
    t_start: float = field(default_factory=time.perf_counter)


class Scheduler:
    def __init__(
        self,
        backend: Backend,
        metrics: ServeMetrics,
        log: ServerLog,
        max_batch: int,
        decode_log_interval: int = 40,
        step_log: bool = True,
        faults: HostFaults | None = None,
    ):
        self.backend = backend
        self.metrics = metrics
        self.log = log
        self.max_batch = max_batch
        self.faults = faults or HostFaults()
        self.decode_log_interval = max(1, decode_log_interval)
        self.step_log = step_log and backend.info.num_draft_tokens > 0
        self.waiting: deque[RequestState] = deque()
        self.running: dict[str, RequestState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # the step loop off the event loop (a thread or the engine's process; None: the task)
        self._driver: StepDriver | None = None
        # requests handed to the driver and not yet admitted, rejected or dropped by it
        self._handed: dict[str, RequestState] = {}
        self._interval = _Interval()
        # Lifetime acceptance for /get_server_info (SGLang: spec_total_num_accept_tokens / forward_ct).
        self.total_accept_tokens = 0
        self.total_forward_ct = 0
        self.last_gen_throughput = 0.0
        # perf_counter at the last step's end while requests run (None when idle): the
        # step_between metric's start
        self._step_ended: float | None = None
        self._prefill_s = 0.0  # the last admission's prefill time (the asyncio path)

    @property
    def spec_enabled(self) -> bool:
        return self.backend.info.num_draft_tokens > 0

    @property
    def queued(self) -> int:
        """Requests waiting for a slot, here or in the step loop's hands."""
        return len(self.waiting) + len(self._handed)

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        post = asyncio.get_running_loop().call_soon_threadsafe
        if isinstance(self.backend, OwnsStepLoop):
            self._driver = self.backend.start_steps(
                self._on_report, post, self.max_batch, self.faults
            )
            return
        if isinstance(self.backend, ThreadSteppable):
            thread = StepThread(
                self.backend,
                deque(),
                self.max_batch,
                self._on_report,
                post,
                step_work=self.faults.on,
            )
            thread.start()
            self._driver = thread
            return
        self._task = asyncio.create_task(self._loop(), name="specscope-scheduler")

    async def stop(self) -> None:
        if self._driver is not None:
            await asyncio.to_thread(self._driver.stop)  # it frees what it held
            self._handed.clear()
            self.running.clear()
            return
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for state in [*self.waiting, *self.running.values()]:
            self.backend.release(state.request_id)
        self.waiting.clear()
        self.running.clear()

    def abort_all(self, message: str = "server shutting down") -> None:
        """End every request (their streams stop without [DONE]) before the server exits."""
        for state in [*self.waiting, *self._handed.values()]:
            state.cancelled = True
            state.events.put_nowait(ErrorEvent(message, 503))
            if self._driver is not None:
                self._driver.cancel(state.request_id)
        self.waiting.clear()
        self._handed.clear()
        for state in list(self.running.values()):
            self._fail(state, message, 503)
        self.metrics.num_running_reqs.set(0)

    def submit(self, state: RequestState) -> None:
        hist_len = max(1, self.backend.info.num_draft_tokens)
        state.histogram = [0] * hist_len
        if not isinstance(self.backend, OwnsStepLoop):  # that loop builds its own, where it runs
            state.step_work = self.faults.step_work(self.backend.detokenize)
        if self._driver is None:
            self.waiting.append(state)
            self._wake.set()
        elif self._driver.lost is not None:  # the engine process is gone: fail at once
            state.events.put_nowait(ErrorEvent(self._driver.lost, 500))
            return
        else:
            self._handed[state.request_id] = state
            self._driver.submit(state)
        self.metrics.num_queue_reqs.set(self.queued)

    def cancel(self, request_id: str) -> None:
        """The client went away: free the request at the next step boundary."""
        for state in self.waiting:
            if state.request_id == request_id:
                state.cancelled = True
        state = self.running.get(request_id) or self._handed.get(request_id)
        if state is None or state.finished:  # the handlers cancel every request they end
            self._wake.set()
            return
        state.cancelled = True
        self._wake.set()
        if self._driver is not None:
            self._driver.cancel(request_id)

    # -- loop ----------------------------------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            if not self.running and not self.waiting:
                self._step_ended = None  # idle time is not time between steps
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                self._reap()
                t0 = time.perf_counter()
                await self._admit()
                self._prefill_s = time.perf_counter() - t0
                self._reap()
                if self.running:
                    await self._step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a backend bug fails its requests, never the server
                self.log.info(f"Scheduler error: {type(exc).__name__}: {exc}")
                for state in list(self.running.values()):
                    self._fail(state, f"internal error: {type(exc).__name__}", 500)
                await asyncio.sleep(0)

    def _reap(self) -> None:
        for rid, state in list(self.running.items()):
            if state.cancelled:
                del self.running[rid]
                self.backend.release(rid)
                self.metrics.num_aborted.inc()
        self.metrics.num_running_reqs.set(len(self.running))

    async def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_batch:
            state = self.waiting.popleft()
            self.metrics.num_queue_reqs.set(len(self.waiting))
            if state.cancelled:
                continue
            try:
                await self.backend.prefill(state.request_id, state.prompt_ids, state.params)
            except BackendError as exc:
                self.backend.release(state.request_id)
                self.metrics.num_aborted.inc()
                state.events.put_nowait(ErrorEvent(str(exc), exc.status))
                continue
            except Exception as exc:  # a backend bug fails this request, not the server
                self.log.info(f"Prefill error: {type(exc).__name__}: {exc}")
                self.backend.release(state.request_id)
                self.metrics.num_aborted.inc()
                state.events.put_nowait(ErrorEvent(f"internal error: {type(exc).__name__}", 500))
                continue
            self.running[state.request_id] = state
            self.metrics.prompt_tokens.inc(len(state.prompt_ids))
        self.metrics.num_running_reqs.set(len(self.running))

    def _fail(self, state: RequestState, message: str, status: int) -> None:
        self.running.pop(state.request_id, None)
        if self._driver is None:
            self.backend.release(state.request_id)
        else:  # the step loop owns it: it frees it at its next boundary
            state.cancelled = True
            self._driver.cancel(state.request_id)
        state.finished = True
        self.metrics.num_aborted.inc()
        state.events.put_nowait(ErrorEvent(message, status))

    def _on_report(self, report: StepReport) -> None:
        """One pass of the step loop, on the event loop: admissions, rejections, frees, then
        the step's outputs through the same counting and delivery as the async path."""
        if report.fatal:
            self._on_lost(report.error or "the step loop is gone")
            return
        for rid in report.admitted:
            state = self._handed.pop(rid, None)
            if state is None:  # aborted meanwhile (server stopping): the loop reaps it
                continue
            self.running[rid] = state
            self.metrics.prompt_tokens.inc(len(state.prompt_ids))
        for rid, message, status in report.rejected:
            self.metrics.num_aborted.inc()
            state = self._handed.pop(rid, None)
            if state is not None:
                state.events.put_nowait(ErrorEvent(message, status))
        for rid in report.reaped:
            self._handed.pop(rid, None)
            if self.running.pop(rid, None) is not None:
                self.metrics.num_aborted.inc()
        if report.error is not None:
            self.log.info(f"Scheduler error: {report.error}")
            for rid in report.failed:
                state = self.running.get(rid)
                if state is not None:
                    self._fail(state, f"internal error: {report.error.split(':')[0]}", 500)
        self.metrics.num_queue_reqs.set(self.queued)
        self.metrics.num_running_reqs.set(len(self.running))
        self.metrics.step_prefill.inc(report.prefill_s)  # also in a pass with no step out
        batch = report.batch
        if batch is not None:
            self.metrics.step_between.inc(report.between_s)
            self.metrics.step_engine.inc(batch.step_s)
            self.metrics.step_wait.inc(report.wait_s)
            self.metrics.step_post.inc(report.post_s)
            self._deliver(batch)

    def _on_lost(self, why: str) -> None:
        """The step loop died (its process exited): every request it held or was about to
        take fails with a 500 now, instead of waiting for steps that will not come."""
        states = [*self.running.values(), *self._handed.values()]
        self.log.info(f"Scheduler error: {why}; failing {len(states)} request(s)")
        for state in states:
            state.cancelled = state.finished = True
            self.metrics.num_aborted.inc()
            state.events.put_nowait(ErrorEvent(why, 500))
        self.running.clear()
        self._handed.clear()
        self.metrics.num_queue_reqs.set(self.queued)
        self.metrics.num_running_reqs.set(0)

    async def _step(self) -> None:
        ids = list(self.running)
        t0 = time.perf_counter()
        self.metrics.step_prefill.inc(self._prefill_s)
        if self._step_ended is not None:
            self.metrics.step_between.inc(max(0.0, t0 - self._step_ended - self._prefill_s))
        batch: BatchStep = await self.backend.step(ids)
        t1 = time.perf_counter()
        self.metrics.step_engine.inc(batch.step_s)
        self.metrics.step_wait.inc(max(0.0, t1 - t0 - batch.step_s))
        if self.faults.on:
            run_step_work(batch, self.running)
        self._deliver(batch)
        self._step_ended = time.perf_counter()
        self.metrics.step_post.inc(self._step_ended - t1)

    def _deliver(self, batch: BatchStep) -> None:
        """A step's outputs into the counters, the logs and each request's event queue. The
        Prometheus counters move once per step with the step's sums (one lock each, not one
        per request: at C = 256 that is 1,280 increments a step fewer on the event loop)."""
        iv = self._interval
        iv.steps += 1
        self.metrics.forward_steps.inc()
        tokens = accepted = proposed = verified = 0
        for out in batch.outputs:
            state = self.running.get(out.request_id)
            if state is None:
                continue
            n = len(out.tokens)
            tokens += n
            accepted += out.accepted_drafts
            proposed += out.proposed_drafts
            verified += 1
            self._count(state, out, n)
            if out.finished:
                state.finished = True
                del self.running[out.request_id]
                if self._driver is None:  # else the step loop has freed it already
                    self.backend.release(out.request_id)
                self.metrics.num_requests.inc()
            if not state.cancelled:
                state.events.put_nowait(
                    StepEvent(out.tokens, out.accepted_drafts, out.finished, out.finish_reason)
                )
        iv.forward_ct += verified
        iv.accept_tokens += tokens
        iv.accepted += accepted
        iv.proposed += proposed
        iv.tokens += tokens
        self.total_forward_ct += verified
        self.total_accept_tokens += tokens
        self.metrics.generation_tokens.inc(tokens)
        if self.spec_enabled and verified:
            self.metrics.spec_verify_steps.inc(verified)
            self.metrics.spec_accept_tokens.inc(tokens)
            self.metrics.spec_accepted_drafts.inc(accepted)
            self.metrics.spec_proposed_drafts.inc(proposed)
        self.metrics.num_running_reqs.set(len(self.running))
        if iv.steps >= self.decode_log_interval:
            self._log_interval()

    def _count(self, state: RequestState, out: StepOutput, n: int) -> None:
        """One request's own record of a step: its tokens, its speculation counters."""
        state.completion_tokens += n
        state.output_ids += out.tokens
        state.verify_ct += 1
        state.accepted_drafts += out.accepted_drafts
        state.proposed_drafts += out.proposed_drafts
        if state.histogram:
            state.histogram[min(out.accepted_drafts, len(state.histogram) - 1)] += 1
        if self.step_log:
            self.log.ddtree_step(out.request_id, state.verify_ct, out.accepted_drafts, n)

    def _log_interval(self) -> None:
        iv = self._interval
        now = time.perf_counter()
        throughput = iv.tokens / max(1e-9, now - iv.t_start)
        self.last_gen_throughput = throughput
        self.metrics.gen_throughput.set(throughput)
        info = self.backend.info
        accept_len = accept_rate = None
        if self.spec_enabled and iv.forward_ct:
            accept_len = iv.accept_tokens / iv.forward_ct
            per_step = max(1, info.num_draft_tokens - 1)
            accept_rate = (iv.accept_tokens - iv.forward_ct) / (iv.forward_ct * per_step)
            self.metrics.spec_accept_length.set(accept_len)
            self.metrics.spec_accept_rate.set(accept_rate)
        used = sum(len(s.prompt_ids) + s.completion_tokens for s in self.running.values())
        capacity = int(info.extra.get("max_total_tokens", info.max_context * self.max_batch))
        self.log.decode_batch(
            running=len(self.running),
            tokens=used,
            token_usage=used / max(1, capacity),
            accept_len=accept_len,
            accept_rate=accept_rate,
            gen_throughput=throughput,
            queued=len(self.waiting),
            cuda_graph=0 < len(self.running) <= int(info.extra.get("graph_max_batch") or 0),
        )
        self._interval = _Interval(t_start=now)

    @property
    def avg_spec_accept_length(self) -> float | None:
        if not self.spec_enabled or self.total_forward_ct == 0:
            return None
        return self.total_accept_tokens / self.total_forward_ct
