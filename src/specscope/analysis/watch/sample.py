"""One canary request as the detector sees it: its commit length and step time (from the
stream's reconstructed steps), and how each moves between the first and second half of the
generation (what tells a position effect from a uniform one when an alert fires)."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from specscope.analysis.steps.reconstruct import reconstruct_steps
from specscope.trace.model import RequestTrace, ServerSpecFields

# Fewer steps than this say too little about a request's commit length and step time.
MIN_STEPS = 8


@dataclass(frozen=True)
class CanarySample:
    """One canary's figures. `t` is when it ended (seconds, any clock the caller keeps)."""

    t: float
    commit_len: float
    step_s: float
    steps: int
    tokens: int
    # log(second half / first half) of the generation: commit length and step time
    commit_trend: float
    step_trend: float
    reliable: bool = True
    # per-step standard deviations (the window's intervals pool them)
    commit_sd: float = 0.0
    step_sd: float = 0.0
    # draft tokens the server says it proposed for this canary (its per-request figures); None
    # when it said nothing. A drafting server can still commit ~1 token a step (an n-gram
    # drafter that finds few matches in this prompt): that canary is not speculation off.
    drafted: int | None = None

    @property
    def log_commit(self) -> float:
        return math.log(self.commit_len)

    @property
    def log_step(self) -> float:
        return math.log(self.step_s)


def _half_ratio(values: Sequence[float]) -> float:
    """log(mean of the second half / mean of the first half); 0 when a half is empty or 0."""
    mid = len(values) // 2
    first, second = values[:mid], values[mid:]
    if not first or not second:
        return 0.0
    a, b = sum(first) / len(first), sum(second) / len(second)
    return math.log(b / a) if a > 0 and b > 0 else 0.0


def _sd(values: Sequence[float]) -> float:
    """The sample standard deviation, 0 for fewer than two values."""
    return statistics.stdev(values) if len(values) >= 2 else 0.0


def sample_from_steps(
    t: float, steps: Sequence[tuple[int, float]], reliable: bool = True
) -> CanarySample | None:
    """A sample from (commit_len, step_s) pairs in generation order; None with too few steps
    (a canary cut short says nothing about the steady generation)."""
    timed = [(k, s) for k, s in steps if s > 0]
    if len(timed) < MIN_STEPS:
        return None
    commits = [float(k) for k, _ in timed]
    times = [s for _, s in timed]
    return CanarySample(
        commit_sd=_sd(commits),
        step_sd=_sd(times),
        t=t,
        commit_len=sum(commits) / len(commits),
        step_s=sum(times) / len(times),
        steps=len(timed),
        tokens=int(sum(commits)),
        commit_trend=_half_ratio(commits),
        step_trend=_half_ratio(times),
        reliable=reliable,
    )


def server_drafts(fields: ServerSpecFields | None) -> int | None:
    """Draft tokens the server reports proposing for one request (vLLM `num_draft_tokens`,
    SGLang's proposed drafts, llama.cpp's `draft_n`, else the per-step drafted list's sum);
    None when it reports neither: the canary's own steps are then all there is to go on."""
    if fields is None:
        return None
    if fields.proposed_drafts is not None:
        return fields.proposed_drafts
    if fields.per_step_drafted is not None:
        return sum(fields.per_step_drafted)
    return None


def sample_from_trace(
    trace: RequestTrace, t: float, max_commit_len: int | None = None
) -> CanarySample | None:
    """A finished canary's sample from its stream (analysis.steps.reconstruct: the server's
    per-step list where it covers every step, else the chunks); None for a failed request or
    too few steps. Unreliable steps (chunks that merge steps) still give a sample, marked so:
    the detector leaves its commit length out."""
    if not trace.ok:
        return None
    rec = reconstruct_steps(trace, max_commit_len=max_commit_len)
    sample = sample_from_steps(t, [(s.commit_len, s.step_s) for s in rec.steps], rec.reliable)
    drafted = server_drafts(trace.server_spec)
    if sample is None or drafted is None:
        return sample
    return dataclasses.replace(sample, drafted=drafted)
