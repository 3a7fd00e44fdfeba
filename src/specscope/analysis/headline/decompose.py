"""Decode throughput as commit length over step time, and the exact split of a tps ratio.

ARCHITECTURE §1: over a decode window, `tps = sum(k) / sum(s) = mean_commit_len / mean_step_s`
(token-weighted: long requests count for more, as they do on the server's clock). For a
baseline B and an observation O,

    tps_B / tps_O = (L_B / L_O) * (s_O / s_B)     # acceptance factor * step-time factor

holds exactly because both sides are computed from the same three totals (tokens, steps,
seconds). Intervals of the split resample unit rows (analysis.uncertainty: whole requests, or
blocks of consecutive steps) of both runs independently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specscope.analysis.headline.uncertainty import (
    DEFAULT_RESAMPLES,
    percentile_interval,
    resampled_totals,
)


@dataclass(frozen=True)
class Decomposition:
    """Totals over a decode window and the three numbers derived from them."""

    tokens: float
    steps: float
    seconds: float

    @property
    def decode_tps(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None

    @property
    def mean_commit_len(self) -> float | None:
        return self.tokens / self.steps if self.steps > 0 else None

    @property
    def mean_step_s(self) -> float | None:
        return self.seconds / self.steps if self.steps > 0 else None


@dataclass(frozen=True)
class Split:
    """tps_ratio = acceptance_factor * step_time_factor (baseline over observed)."""

    tps_ratio: float
    acceptance_factor: float
    step_time_factor: float


@dataclass(frozen=True)
class SplitCI:
    point: Split
    tps_ratio: tuple[float, float]
    acceptance_factor: tuple[float, float]
    step_time_factor: tuple[float, float]
    resamples: int
    unit: str  # "request" | "block"


def decompose(
    commit_len: np.ndarray | list[float], step_s: np.ndarray | list[float]
) -> Decomposition:
    """Totals of one set of steps. The identity tps == L / s holds by construction."""
    k = np.asarray(commit_len, dtype=float)
    s = np.asarray(step_s, dtype=float)
    return Decomposition(tokens=float(k.sum()), steps=float(k.size), seconds=float(s.sum()))


def split(baseline: Decomposition, observed: Decomposition) -> Split | None:
    """The exact acceptance/step-time split of tps_B / tps_O; None when either side is empty."""
    lb, lo = baseline.mean_commit_len, observed.mean_commit_len
    sb, so = baseline.mean_step_s, observed.mean_step_s
    if not (lb and lo and sb and so):
        return None
    acc = lb / lo
    stf = so / sb
    return Split(tps_ratio=acc * stf, acceptance_factor=acc, step_time_factor=stf)


def split_ci(
    baseline_rows: np.ndarray,
    observed_rows: np.ndarray,
    *,
    unit: str = "request",
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> SplitCI | None:
    """Point split from the full totals plus percentile CIs from resampling both sides
    independently (the runs are independent measurements)."""
    b = Decomposition(*baseline_rows.sum(axis=0)) if baseline_rows.size else None
    o = Decomposition(*observed_rows.sum(axis=0)) if observed_rows.size else None
    point = split(b, o) if b and o else None
    if point is None:
        return None
    rng = np.random.default_rng(seed)
    tb = resampled_totals(baseline_rows, resamples, rng)
    to = resampled_totals(observed_rows, resamples, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        acc = (tb[:, 0] / tb[:, 1]) / (to[:, 0] / to[:, 1])
        stf = (to[:, 2] / to[:, 1]) / (tb[:, 2] / tb[:, 1])
    return SplitCI(
        point=point,
        tps_ratio=percentile_interval(acc * stf),
        acceptance_factor=percentile_interval(acc),
        step_time_factor=percentile_interval(stf),
        resamples=resamples,
        unit=unit,
    )
