"""Enough data, adaptively: after the plan, more of the measurement that decides decode tps (the
full generation; a probe's requests) until its 95% interval is as narrow as asked or the budget
is spent.

The decisions (narrow enough? how many more?) are analysis.precision's, pure and tested there;
`repeat_rounds` only sends what they ask through the caller's runner (diagnose's `Executor`,
the probe's workload runner), so every request is appended to the run dir as it ends and a
Ctrl-C keeps the ones in flight as `cancelled`. The outcome is
filled as the loop goes (pass one in to keep it when the caller is cancelled): `stopped_by`
stays None until the loop itself ends, so a caller that sees None after a Ctrl-C knows it was
interrupted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from specscope.analysis.headline import precision
from specscope.experiments.executor import ExecutionResult, Executor
from specscope.experiments.plan import FINISH_S, Plan, PlanStep, PrecisionPlan
from specscope.trace import RequestTrace


@dataclass
class PrecisionOutcome:
    """What the repeats did and reached (recorded in run.json `precision`)."""

    target: float
    budget_s: float | None = None
    budget_tokens: int | None = None
    stopped_by: str | None = None  # analysis.precision.STOPPED_BY; None while running
    reason: str = ""
    requests: int = 0  # of the measurement, with a decode window
    reached: float | None = None  # relative half-width at the last reading
    over_requests: bool = False
    needed: int | None = None  # requests in all the last reading said the target needs
    rounds: int = 0
    added_requests: int = 0
    spent_s: float = 0.0
    spent_tokens: int = 0

    def to_dict(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in vars(self).items()}

    def closed(self, *, interrupted: bool, stopped_reason: str | None) -> dict:
        """The record for run.json once the run ends: a loop that never finished (Ctrl-C, or
        the plan stopped before the repeats) says why."""
        if self.stopped_by is None:
            self.stopped_by = precision.INTERRUPTED if interrupted else precision.ERRORS
            self.reason = (
                "interrupted (Ctrl-C)"
                if interrupted
                else f"the plan stopped before the repeats: {stopped_reason or 'errors'}"
            )
        return self.to_dict()


def _measurement(plan: Plan, pp: PrecisionPlan) -> PlanStep | None:
    return next((s for s in plan.steps if s.tag == pp.tag), None)


def repeats_budget_s(pp: PrecisionPlan, elapsed_s: float) -> float | None:
    """The seconds the repeats may spend when they start `elapsed_s` into the command: the
    budget, and under a deadline no more than what it leaves once the analysis (FINISH_S) is
    set aside (None: no time limit)."""
    if pp.deadline_s is None:
        return pp.budget_s
    left = max(0.0, pp.deadline_s - elapsed_s - FINISH_S)
    return left if pp.budget_s is None else min(pp.budget_s, left)


def expected_repeats_s(plan: Plan) -> float:
    """Seconds the repeats are expected to add, for the plan's estimate: the requests the loop
    sends before it can stop on precision at all (it reads an interval over requests from
    MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP on), at the plan's rates, as many as the budget fits
    (`plan.elapsed_s` must be set: under a deadline the budget is what the steps leave)."""
    pp = plan.precision
    step = _measurement(plan, pp) if pp is not None else None
    if pp is None or pp.target <= 0 or step is None:
        return 0.0
    one = replace(step, repeat=1, concurrency=1).estimate_s(
        plan.decode_tps_assumed, plan.prefill_tps_assumed
    )
    more = max(0, precision.MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP - pp.start_requests)
    more = min(more, pp.max_requests - pp.start_requests)
    budget = repeats_budget_s(pp, plan.elapsed_s + plan.estimate_s())
    if budget is not None and one > 0:
        more = min(more, math.floor(budget / one))
    return max(0, more) * one


def _seconds_per_request(traces: list[RequestTrace]) -> float:
    """Mean wall time of the measurement's finished requests (send to last byte)."""
    spans = [
        (t.t_end_ns - t.t_send_ns) / 1e9
        for t in traces
        if t.ok and t.t_end_ns is not None and t.t_end_ns > t.t_send_ns
    ]
    return sum(spans) / len(spans) if spans else 0.0


# Sends `n` more requests of the measurement; returns why the run must stop (None: go on).
SendMore = Callable[[int], Awaitable[str | None]]


async def repeat_rounds(
    measured: Callable[[], list[RequestTrace]],
    send_more: SendMore,
    out: PrecisionOutcome,
    *,
    budget: precision.Budget,
    tokens_per_request: int,
    clock: Callable[[], float] = time.monotonic,
) -> PrecisionOutcome:
    """Rounds of `send_more` until analysis.precision.decide says stop: the loop `diagnose` and
    `probe` share. `measured()`: the measurement's traces so far (new ones appended at the
    end); `out.target`: the relative half-width asked for."""
    started = clock()
    committed = 0  # the most requests a reading asked for: no stop on precision before them
    while True:
        traces = measured()
        r = _read(out, traces)
        out.spent_s = clock() - started
        d = precision.decide(
            r,
            out.target,
            budget,
            attempted=len(traces),
            committed=committed,
            spent_s=out.spent_s,
            spent_tokens=out.spent_tokens,
            seconds_per_request=_seconds_per_request(traces),
            tokens_per_request=tokens_per_request,
        )
        out.needed, out.reason = d.needed, d.reason
        committed = max(committed, d.needed or 0)
        if d.stopped_by is not None:
            out.stopped_by = d.stopped_by
            return out
        before = len(traces)
        stop: str | None = None
        try:
            stop = await send_more(d.more)
        finally:
            new = measured()[before:]
            out.rounds += 1
            out.added_requests += len(new)
            out.spent_tokens += sum(t.completion_tokens or t.tokens_received for t in new)
            out.spent_s = clock() - started
        if stop is not None or (new and all(t.error is not None for t in new)):
            out.stopped_by = precision.ERRORS
            out.reason = stop or f"all {len(new)} repeats of the round failed"
            _read(out, measured())
            return out


async def repeat_until_precise(
    executor: Executor,
    plan: Plan,
    result: ExecutionResult,
    outcome: PrecisionOutcome | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    started: float | None = None,
) -> PrecisionOutcome:
    """Run rounds of the plan's measurement step (`plan.precision.tag`) until
    analysis.precision.decide says stop. `result` holds the plan's traces and gets the new ones.
    `started`: the command's start on `clock` (default: now), from which a deadline counts."""
    pp = plan.precision
    if pp is None:
        raise ValueError("the plan has no precision target")
    out = outcome if outcome is not None else PrecisionOutcome(pp.target)
    budget_s = repeats_budget_s(pp, 0.0 if started is None else clock() - started)
    out.budget_s, out.budget_tokens = budget_s, pp.budget_tokens
    step = _measurement(plan, pp)
    if pp.target <= 0 or step is None:
        out.stopped_by = precision.OFF
        out.reason = (
            "--precision 0: the plan's requests only"
            if pp.target <= 0
            else f"the plan has no {pp.tag} step"
        )
        return out

    async def send_more(n: int) -> str | None:
        completed, result.completed_steps = result.completed_steps, 0
        try:
            await executor.run(
                Plan(steps=[replace(step, repeat=n, concurrency=1, purpose="precision repeats")]),
                result,
            )
        finally:
            result.completed_steps = completed
        return result.stopped_reason

    return await repeat_rounds(
        lambda: [t for t in result.traces if t.spec.tag == step.tag],
        send_more,
        out,
        budget=precision.Budget(budget_s, pp.budget_tokens, pp.max_requests),
        tokens_per_request=step.max_tokens,
        clock=clock,
    )


def _read(out: PrecisionOutcome, traces: list[RequestTrace]) -> precision.Reading:
    """The measurement's reading so far, copied onto the outcome."""
    r = precision.reading(traces)
    out.requests, out.reached, out.over_requests = (
        r.requests,
        r.relative_half_width,
        r.over_requests,
    )
    return r
