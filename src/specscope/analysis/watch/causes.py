"""An alert's likely cause, in the diagnosis' vocabulary (analysis.diagnosis.cards.Cause).

A watch has one cheap piece of evidence the diagnosis uses too: whether the change sits in the
later output positions (each canary's second half against its first) or everywhere. A fall in
commit length that deepens along the generation is `acceptance_position` (drafts accepted less
further in), a uniform one `drafter_quality`; step time that grows along the generation is
`kv_layout` (stateful degradation, the story's page_size=1; `host_per_token` the other
candidate), a uniform rise `acceptance_concurrency` (the canary's steps cost more because the
server batches other traffic with it; eager fallback, `graph_mode`, would look the same).
A full `specscope diagnose` separates the candidates; the alert suggests it."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from specscope.analysis.diagnosis.cards import Cause
from specscope.analysis.watch.baseline import Series

TREND_Z = 2.0  # the trend's change must stand this many standard errors out
TREND_MIN = 0.03  # ... and be at least 3% between the halves


@dataclass(frozen=True)
class CauseGuess:
    cause: str | None
    candidates: tuple[str, ...]
    reason: str


def trend_moved(base: Series, post: Sequence[float], sign: int) -> bool:
    """Whether the post-change trend moved in direction `sign` beyond TREND_Z standard errors
    and TREND_MIN."""
    if not post:
        return False
    diff = sign * (statistics.fmean(post) - base.mean)
    se = base.sd_eff * math.sqrt(1 / len(post) + 1 / base.n)
    return diff > TREND_MIN and diff > TREND_Z * se


def commit_cause(base: Series, post_trends: Sequence[float]) -> CauseGuess:
    if trend_moved(base, post_trends, -1):
        return CauseGuess(
            Cause.acceptance_position.value,
            (Cause.acceptance_position.value, Cause.drafter_quality.value),
            "the fall deepens along each canary's generation",
        )
    return CauseGuess(
        Cause.drafter_quality.value,
        (Cause.drafter_quality.value, Cause.draft_window.value),
        "the fall is even along each canary's generation",
    )


def step_cause(base: Series, post_trends: Sequence[float]) -> CauseGuess:
    if trend_moved(base, post_trends, +1):
        return CauseGuess(
            Cause.kv_layout.value,
            (Cause.kv_layout.value, Cause.host_per_token.value),
            "step time grows along each canary's generation (stateful degradation)",
        )
    return CauseGuess(
        Cause.acceptance_concurrency.value,
        (Cause.acceptance_concurrency.value, Cause.graph_mode.value),
        "step time rose evenly along each canary's generation",
    )


SPECULATION_OFF = CauseGuess(
    None,
    (),
    "the canaries commit one token a step: the server stopped drafting (restarted without "
    "speculation, or a gate such as TensorRT-LLM's SpeculationGate switched it off)",
)
