"""The engine core in a process of its own: the HTTP side and the engine no longer share one
interpreter lock.

Why: with the engine stepped by a thread of the server's process, each step's launches and
bookkeeping waited while the event loop turned the previous step's tokens into text, JSON and SSE
for every stream: the backend's own step was 21 ms served against 4.4 ms alone at C = 256 on the
H200 (ARCHITECTURE §7.1). vLLM (API server + engine core over ZMQ) and SGLang (tokenizer manager,
scheduler, detokenizer processes) split them; so does this.

What runs where. The child (spawned: no CUDA state or threads inherited) builds the backend from
a picklable factory (the CLI's `build_backend` with its options) and runs the step loop
(`StepLoop`: admit, prefill, step, the host faults' step work, free), sending ONE message per
pass: the `StepReport` itself (request ids, the batch's outputs, timings). The parent keeps HTTP,
tokenization and detokenization (the child sends its codec once, at start), the scheduler's
counting, logs, events and /metrics. Parent -> child: config, submit (id, prompt ids, sampling
params), cancel, stop, over one multiprocessing Pipe; a writer thread sends them so that the
event loop never blocks on a full pipe, a reader thread hands each report to the event loop in
one `call_soon_threadsafe`.

Failures. The child failing to build its backend is one line (`EngineStartError`), raised before
the server listens. The child dying later posts a fatal report: the scheduler fails every
request with a 500 and says so in its log, and new requests fail at once. `stop` asks the child
to stop, joins it (bounded), then terminates and kills it; the child ignores Ctrl-C (the parent
stops it) and exits by itself when the parent's end of the pipe closes (the parent died).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import queue
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Protocol

from specscope.backend import BackendInfo
from specscope.serve.faults import HostFaults
from specscope.serve.scheduler import RequestState
from specscope.serve.step_thread import StepDriver, StepLoop, StepReport, ThreadSteppable

START_TIMEOUT_S = 900.0  # a cold CUDA start (weights, graph capture, torch.compile) takes minutes
STOP_TIMEOUT_S = 10.0


class EngineStartError(RuntimeError):
    """The engine process could not build its backend; the message is one line."""


class TextSide(Protocol):
    def tokenize(self, text: str) -> list[int]: ...

    def detokenize(self, ids: list[int]) -> str: ...

    def apply_chat_template(self, messages: list[dict[str, Any]]) -> list[int]: ...

    def eos_token_ids(self) -> set[int]: ...


class ProcessSteppable(ThreadSteppable, Protocol):
    """What the child needs of the backend it builds: the synchronous step and its text side."""

    info: BackendInfo

    def text_side(self) -> TextSide: ...


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


# -- the child -------------------------------------------------------------------------------------
def child_main(conn: Connection, factory: Callable[[], ProcessSteppable]) -> None:
    """The engine process: build the backend, say ready (or why not), then run the step loop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        backend = factory()
        conn.send(("ready", backend.info, backend.text_side()))
    except BaseException as exc:  # any start failure is the parent's one line
        with contextlib.suppress(OSError):
            conn.send(("failed", _one_line(exc)))
        return
    _ChildLoop(conn, backend).run()


class _ChildLoop:
    """The child's one thread: drain the parent's messages, one pass, send its report; again.
    Single-threaded, so cancellations and passes never race."""

    def __init__(self, conn: Connection, backend: ProcessSteppable):
        self.conn = conn
        self.backend = backend
        self.waiting: deque[RequestState] = deque()
        self.states: dict[str, RequestState] = {}  # waiting or active, by id
        self.loop: StepLoop | None = None
        self.faults = HostFaults()
        self._outbox: queue.SimpleQueue[StepReport | None] = queue.SimpleQueue()

    def run(self) -> None:
        sender = threading.Thread(target=self._send_reports, name="specscope-engine-send")
        sender.start()
        try:
            while self._drain(0.0 if self.loop is not None and self.loop.busy else 1.0):
                if self.loop is None:
                    continue
                report = self.loop.run_pass()
                if report:
                    self._forget(report)
                    self._outbox.put(report)
        except (EOFError, OSError):  # the parent is gone
            pass
        finally:
            self._outbox.put(None)
            if self.loop is not None:
                self.loop.release_all()
            sender.join(STOP_TIMEOUT_S)

    def _send_reports(self) -> None:
        """Pickle and write each report off the step's path: the write wakes the parent's
        reader, which cost the loop ~0.2 ms a pass at C = 1 (H200, 2026-12-04) when the loop
        wrote itself; here it overlaps the next step (torch releases the interpreter lock
        while the device works)."""
        while (report := self._outbox.get()) is not None:
            try:
                self.conn.send(report)
            except OSError:  # the parent is gone: the loop's next read says so
                return

    def _drain(self, timeout: float) -> bool:
        """Handle every message waiting (after up to `timeout` s for the first); False: stop."""
        if not self.conn.poll(timeout):
            return True
        while True:
            msg = self.conn.recv()  # EOFError when the parent died
            kind = msg[0]
            if kind == "stop":
                return False
            if kind == "config":
                self.faults = msg[2]
                self.loop = StepLoop(self.backend, self.waiting, msg[1], self.faults.on)
            elif kind == "submit":
                state = RequestState(msg[1], msg[2], msg[3])
                state.step_work = self.faults.step_work(self.backend.detokenize)
                self.states[state.request_id] = state
                self.waiting.append(state)
            elif kind == "cancel" and msg[1] in self.states:
                self.states[msg[1]].cancelled = True
            if not self.conn.poll(0):
                return True

    def _forget(self, report: StepReport) -> None:
        """Drop the records of requests that left the loop in this pass."""
        gone = [*report.reaped, *report.failed, *(r for r, _, _ in report.rejected)]
        if report.batch is not None:
            gone += [o.request_id for o in report.batch.outputs if o.finished]
        for rid in gone:
            self.states.pop(rid, None)


# -- the parent ------------------------------------------------------------------------------------
class EngineProcess:
    """The parent's handle on the engine process: the backend `serve` sees (info and the text
    methods, from the child's codec) and the scheduler's step driver (`start_steps`)."""

    lost: str | None = None

    def __init__(
        self,
        factory: Callable[[], ProcessSteppable],
        start_timeout: float = START_TIMEOUT_S,
    ):
        """Start the child and wait until its backend is built. Raises EngineStartError."""
        ctx = multiprocessing.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        # Not daemonic: a daemonic process may not start processes of its own (torch.compile's
        # workers); stop() and the atexit hook end it instead.
        self.process = ctx.Process(
            target=child_main, args=(child_conn, factory), name="specscope-engine"
        )
        self.process.start()
        self.pid = self.process.pid
        child_conn.close()
        self._stopped = False
        self._outbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        atexit.register(self.stop)
        try:
            self.info, self._text = self._wait_ready(start_timeout)
        except BaseException:
            self.stop()
            raise
        self.info.extra["engine_pid"] = self.pid  # /get_server_info: where the engine runs

    def _wait_ready(self, timeout: float) -> tuple[BackendInfo, TextSide]:
        deadline = time.monotonic() + timeout
        while not self._conn.poll(0.2):
            if not self.process.is_alive():
                raise EngineStartError(self._exit_line("before it was ready"))
            if time.monotonic() > deadline:
                raise EngineStartError(f"the engine process was not ready in {timeout:.0f} s")
        try:
            msg = self._conn.recv()
        except (EOFError, OSError):
            self.process.join(STOP_TIMEOUT_S)
            raise EngineStartError(self._exit_line("before it was ready")) from None
        if msg[0] == "failed":
            raise EngineStartError(msg[1])
        return msg[1], msg[2]

    def _exit_line(self, when: str) -> str:
        code = self.process.exitcode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"code {code}"
        return f"the engine process (pid {self.process.pid}) exited {when} ({how})"

    # -- the text side (Backend's, for HTTP) --------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        return self._text.tokenize(text)

    def detokenize(self, ids: list[int]) -> str:
        return self._text.detokenize(ids)

    def apply_chat_template(self, messages: list[dict[str, Any]]) -> list[int]:
        return self._text.apply_chat_template(messages)

    def eos_token_ids(self) -> set[int]:
        return self._text.eos_token_ids()

    # -- the step driver ------------------------------------------------------------------------
    def start_steps(
        self,
        report: Callable[[StepReport], None],
        post: Callable[[Callable[[StepReport], None], StepReport], None],
        max_batch: int,
        faults: HostFaults,
    ) -> StepDriver:
        """Configure the child's loop and start the threads that carry messages both ways."""
        self._outbox.put(("config", max_batch, faults))
        for target, name in ((self._write, "writer"), (self._read, "reader")):
            args = (report, post) if target == self._read else ()
            thread = threading.Thread(
                target=target, args=args, name=f"specscope-engine-{name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return self

    def submit(self, state: RequestState) -> None:
        self._outbox.put(("submit", state.request_id, state.prompt_ids, state.params))

    def cancel(self, request_id: str) -> None:
        self._outbox.put(("cancel", request_id))

    def _write(self) -> None:
        while (msg := self._outbox.get()) is not None:
            try:
                self._conn.send(msg)
            except OSError:  # the child is gone; the reader says so
                return

    def _read(self, report: Callable[[StepReport], None], post: Callable[..., None]) -> None:
        while True:
            try:
                msg = self._conn.recv()
            except (EOFError, OSError):
                break
            with contextlib.suppress(RuntimeError):  # the event loop closed: the server stops
                post(report, msg)
        if self._stopped:
            return
        self.process.join(STOP_TIMEOUT_S)
        self.lost = self._exit_line("while serving")
        with contextlib.suppress(RuntimeError):
            post(report, StepReport(error=self.lost, fatal=True))

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the child after its current pass and join it (bounded: then terminate, kill).
        Idempotent; blocking (the scheduler calls it from a worker thread)."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        if self._threads:
            self._outbox.put(("stop",))
            self._outbox.put(None)
        else:
            with contextlib.suppress(OSError):
                self._conn.send(("stop",))
        self.process.join(timeout)
        for end in (self.process.terminate, self.process.kill):
            if self.process.is_alive():
                end()
                self.process.join(3.0)
        for thread in self._threads:
            thread.join(2.0)
        self._conn.close()
