"""An alert's candidate causes, in the diagnosis' vocabulary (analysis.diagnosis.cards.Cause).

A watch has one cheap piece of evidence the diagnosis uses too: whether the change sits in the
later output positions (each canary's second half against its first) or everywhere. It narrows
the candidates, it does not decide between them, so an alert's `cause` stays null and its
`candidates` list what is left, the likelier first (the diagnosis' rule: a cause is named only
when every other candidate is ruled out; specscope once blamed KV fragmentation for a server that
re-detokenized its whole output at every step, and a canary's trend cannot tell those two apart):
- commit length that falls deeper along each canary's generation: acceptance_position, or a
  draft window the longer contexts cross; an even fall: drafter_quality (the text changed, or
  the drafter), or a window shorter than every canary's context;
- step time that grows along each canary's generation: host_per_token or kv_layout (a fresh
  request at the reached context separates them: `specscope diagnose`); an even rise:
  acceptance_concurrency (other traffic batched with the canary) or graph_mode (eager fallback).
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
            None,
            (Cause.acceptance_position.value, Cause.draft_window.value),
            "the fall deepens along each canary's generation",
        )
    return CauseGuess(
        None,
        (Cause.drafter_quality.value, Cause.draft_window.value),
        "the fall is even along each canary's generation",
    )


def step_cause(base: Series, post_trends: Sequence[float]) -> CauseGuess:
    if trend_moved(base, post_trends, +1):
        return CauseGuess(
            None,
            (Cause.host_per_token.value, Cause.kv_layout.value),
            "step time grows along each canary's generation (host work or KV state that grows "
            "with the output)",
        )
    return CauseGuess(
        None,
        (Cause.acceptance_concurrency.value, Cause.graph_mode.value),
        "step time rose evenly along each canary's generation",
    )


SPECULATION_OFF = CauseGuess(
    None,
    (),
    "the canaries commit one token a step: the server stopped drafting (restarted without "
    "speculation, or a gate such as TensorRT-LLM's SpeculationGate switched it off)",
)
