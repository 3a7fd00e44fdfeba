"""A window's figures with intervals: decode rate, commit length and step time over the
canaries that ended in it (tps = commit length / step time, ARCHITECTURE §1).

The intervals pool the canaries' per-step spread (a normal interval over the window's steps,
steps taken as independent: a lower bound of the real width when consecutive steps are
correlated, which the window event says through `interval_method`). Across windows the
detector, not these intervals, decides whether something changed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specscope.analysis.watch.sample import CanarySample

Z95 = 1.959964
INTERVAL_METHOD = "normal over the window's steps (steps taken as independent)"


@dataclass(frozen=True)
class WindowFigures:
    canaries: int
    steps: int
    mean_commit_len: float | None
    mean_commit_len_ci: tuple[float, float] | None
    mean_step_s: float | None
    mean_step_s_ci: tuple[float, float] | None
    decode_tps: float | None
    decode_tps_ci: tuple[float, float] | None


EMPTY = WindowFigures(0, 0, None, None, None, None, None, None)


def _pooled(samples: Sequence[CanarySample], attr: str, sd_attr: str) -> tuple[float, float]:
    """(mean over every step, its standard error) from the samples' step-weighted means and
    per-step spreads (within-request plus between-request variance)."""
    n = sum(s.steps for s in samples)
    mean = sum(getattr(s, attr) * s.steps for s in samples) / n
    ss = sum(
        (s.steps - 1) * getattr(s, sd_attr) ** 2 + s.steps * (getattr(s, attr) - mean) ** 2
        for s in samples
    )
    sd = math.sqrt(ss / max(1, n - 1))
    return mean, sd / math.sqrt(n)


def _ci(mean: float, se: float) -> tuple[float, float]:
    return (mean - Z95 * se, mean + Z95 * se)


def window_figures(samples: Sequence[CanarySample]) -> WindowFigures:
    """The window's figures; EMPTY when no canary ended in it. The commit length counts only
    reliable samples (a chunk that merges steps is not a step); the step time all of them."""
    if not samples:
        return EMPTY
    reliable = [s for s in samples if s.reliable]
    step_mean, step_se = _pooled(samples, "step_s", "step_sd")
    steps = sum(s.steps for s in samples)
    if not reliable:
        return WindowFigures(
            len(samples), steps, None, None, step_mean, _ci(step_mean, step_se), None, None
        )
    c_mean, c_se = _pooled(reliable, "commit_len", "commit_sd")
    tps = c_mean / step_mean
    rel = math.sqrt((c_se / c_mean) ** 2 + (step_se / step_mean) ** 2)
    return WindowFigures(
        canaries=len(samples),
        steps=steps,
        mean_commit_len=c_mean,
        mean_commit_len_ci=_ci(c_mean, c_se),
        mean_step_s=step_mean,
        mean_step_s_ci=_ci(step_mean, step_se),
        decode_tps=tps,
        decode_tps_ci=(tps * math.exp(-Z95 * rel), tps * math.exp(Z95 * rel)),
    )
