"""Runs a plan: sends each step's requests, appends every finished request to the run dir.

Bounded by construction (the plan fixes the number of requests) and by `max_consecutive_errors`
(a server that stopped answering ends the run instead of timing out request after request).
Requests go through the probe's runner (`probe.workload.run_workload`): each is appended as it
ends, and a Ctrl-C records the ones in flight as `cancelled` instead of losing them.
Nothing here prints: progress goes to a callback, results come back as data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from specscope.experiments.plan import Plan, PlanStep
from specscope.experiments.target import Prompt, Target
from specscope.probe.workload import run_workload
from specscope.trace import RequestSpec, RequestTrace, RunDirWriter


@dataclass
class Progress:
    """One event for the progress bar: a request finished (or a step started)."""

    step_index: int
    step: PlanStep
    requests_done: int  # over the whole plan
    requests_total: int
    tokens_done: int  # generated tokens received, over the whole plan
    tokens_total: int  # planned generated tokens
    last: RequestTrace | None = None


ProgressCallback = Callable[[Progress], None]


class Runner(Protocol):
    """Where a step's requests run instead of the target (`probe.fleet`: --workers N)."""

    async def run(
        self,
        specs: Sequence[RequestSpec],
        concurrency: int,
        on_done: Callable[[RequestTrace], None],
        first_index: int,
        stop: Callable[[], bool] | None = None,
    ) -> None: ...


@dataclass
class ExecutionResult:
    traces: list[RequestTrace] = field(default_factory=list)
    completed_steps: int = 0
    stopped_reason: str | None = None  # None when every step ran

    @property
    def errors(self) -> list[RequestTrace]:
        return [t for t in self.traces if t.error is not None]

    @property
    def complete(self) -> bool:
        return self.stopped_reason is None


def _is_connection_failure(trace: RequestTrace) -> bool:
    return trace.error is not None and trace.error.kind in {
        "connection",
        "timeout_first_byte",
        "stream_truncated",
        "timeout",
    }


class Executor:
    """Sends a plan to a target. One instance per run; request indexes are unique within it."""

    def __init__(
        self,
        target: Target,
        writer: RunDirWriter | None,
        on_progress: ProgressCallback | None = None,
        max_consecutive_errors: int = 3,
        temperature: float = 0.0,
        ignore_eos: bool = True,
        api: str = "completions",
        first_index: int = 0,
        runner: Runner | None = None,
    ):
        self.target = target
        self.writer = writer
        self.on_progress = on_progress
        self.max_consecutive_errors = max_consecutive_errors
        self.temperature = temperature
        self.ignore_eos = ignore_eos
        self.api = api
        self._next_index = first_index
        self._consecutive_errors = 0
        # `diagnose --workers N`: the requests run on a fleet of workers (probe.runners); None:
        # through the target, on this process' loop
        self.runner = runner

    async def _prompt(self, step: PlanStep) -> str | list[int] | Prompt:
        """One request's prompt, asked of the target per request so that a target can make
        each one unique (a prefix cache then has nothing to serve). Every experiment asks for
        the same content (seed 0): two-point, full generation and sweeps then differ only in
        shape, not in text that a drafter finds easier or harder. A workload-mix step names
        its category."""
        if step.category is not None:
            return await self.target.prompt(
                step.prompt_tokens,
                seed=0,  # type: ignore[call-arg]
                category=step.category,
            )
        return await self.target.prompt(step.prompt_tokens, seed=0)

    async def _prompts(self, step: PlanStep) -> list[str | list[int] | Prompt]:
        """One prompt per request of the step, in request order."""
        return [await self._prompt(step) for _ in range(step.requests)]

    def _spec(self, step: PlanStep, prompt: str | list[int] | Prompt) -> RequestSpec:
        category = prompt.category if isinstance(prompt, Prompt) else None
        text = prompt.text if isinstance(prompt, Prompt) else prompt
        return RequestSpec(
            prompt=text,
            category=category,
            prompt_tokens=step.prompt_tokens,
            max_tokens=step.max_tokens,
            temperature=self.temperature,
            ignore_eos=self.ignore_eos,
            api=self.api,  # type: ignore[arg-type]
            tag=step.tag,
        )

    def _record(self, trace: RequestTrace, result: ExecutionResult) -> None:
        if self.writer is not None:
            self.writer.append_request(trace)
        result.traces.append(trace)
        if trace.error is None:
            self._consecutive_errors = 0
        elif _is_connection_failure(trace) or trace.error.http_status in (None, 502, 503, 504):
            self._consecutive_errors += 1

    def _stopped(self) -> bool:
        return self._consecutive_errors >= self.max_consecutive_errors

    async def _run_specs(
        self,
        step: PlanStep,
        prompts: list[str | list[int] | Prompt],
        result: ExecutionResult,
        on_done: Callable[[RequestTrace], None] | None = None,
    ) -> None:
        """The step's requests (one per prompt) through the one runner: each is recorded as it
        ends, and the ones in flight when the run is cancelled are recorded as `cancelled`."""
        specs = [self._spec(step, p) for p in prompts]

        def done(trace: RequestTrace) -> None:
            self._record(trace, result)
            if on_done is not None:
                on_done(trace)

        first = self._next_index
        self._next_index += len(specs)
        if self.runner is not None:
            await self.runner.run(specs, step.concurrency, done, first, stop=self._stopped)
            return
        await run_workload(
            self.target, specs, step.concurrency, done, first_index=first, stop=self._stopped
        )

    async def run_step(self, step: PlanStep) -> list[RequestTrace]:
        """Run one step outside a plan (used by calibration); recorded like any other."""
        result = ExecutionResult()
        prompts = await self._prompts(step)
        await self._run_specs(step, prompts, result)
        return result.traces

    async def run(self, plan: Plan, result: ExecutionResult | None = None) -> ExecutionResult:
        """Run every step in order. Pass `result` to keep what was measured when the caller
        cancels this coroutine (Ctrl-C): it is filled as requests finish."""
        result = result if result is not None else ExecutionResult()
        total_req = plan.total_requests
        total_tok = plan.total_generated_tokens
        done = {"requests": 0, "tokens": 0}
        # Every prompt shape is fitted before anything is sent: a tokenizer problem stops the
        # run before it costs a measurement, and later per-request prompts are cheap re-fits
        # that still go out (and fail as requests) when the server dies mid-run.
        try:
            for step in plan.steps:
                await self._prompt(step)
        except Exception as e:  # the prompt builder talks to the server (tokenize)
            result.stopped_reason = f"could not build the plan's prompts: {e}"
            return result
        for i, step in enumerate(plan.steps):
            if self.on_progress:
                self.on_progress(
                    Progress(i, step, done["requests"], total_req, done["tokens"], total_tok)
                )
            try:
                prompts = await self._prompts(step)
            except Exception as e:  # the prompt builder talks to the server (tokenize)
                result.stopped_reason = f"could not build a {step.prompt_tokens}-token prompt: {e}"
                return result

            def progressed(t: RequestTrace, i: int = i, step: PlanStep = step) -> None:
                done["requests"] += 1
                done["tokens"] += t.completion_tokens or t.tokens_received
                if self.on_progress:
                    self.on_progress(
                        Progress(i, step, done["requests"], total_req, done["tokens"], total_tok, t)
                    )

            await self._run_specs(step, prompts, result, progressed)
            if self._stopped():
                last = result.traces[-1].error if result.traces else None
                msg = f"{last.kind}: {last.message}" if last else "errors"
                result.stopped_reason = (
                    f"server stopped answering ({self._consecutive_errors} failed requests "
                    f"in a row, last {msg})"
                )
                return result
            result.completed_steps = i + 1
        return result
