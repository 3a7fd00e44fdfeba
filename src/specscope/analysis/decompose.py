"""Decode throughput as commit length over step time, and the exact split of a tps ratio.

ARCHITECTURE §1: over a decode window, `tps = sum(k) / sum(s) = mean_commit_len / mean_step_s`
(token-weighted: long requests count for more, as they do on the server's clock). For a
baseline B and an observation O,

    tps_B / tps_O = (L_B / L_O) * (s_O / s_B)     # acceptance factor * step-time factor

holds exactly because both sides are computed from the same three totals (tokens, steps,
seconds). Confidence intervals come from a seeded bootstrap over *units*: whole requests when
there are enough of them, otherwise contiguous blocks of steps (a single long generation is the
common case, and its steps are serially correlated, so blocks keep that correlation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Fewer requests than this and the request bootstrap is too coarse (its distribution has only a
# handful of distinct values); switch to blocks of steps.
MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP = 8
DEFAULT_RESAMPLES = 1000  # bounded: each resample is a vectorised sum, ~1 ms for 1000
CI_LEVEL = 0.95


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


def units(
    commit_len: np.ndarray, step_s: np.ndarray, request_ids: np.ndarray, *, block: int | None = None
) -> tuple[np.ndarray, str]:
    """Per-unit totals (rows of tokens, steps, seconds) for the bootstrap.

    Requests are the natural unit (independent draws of the workload). With few requests a
    request bootstrap cannot vary much, so steps are cut into contiguous blocks of ~sqrt(n)
    steps (at least 10) within each request: a non-overlapping block bootstrap.
    """
    k = np.asarray(commit_len, dtype=float)
    s = np.asarray(step_s, dtype=float)
    rid = np.asarray(request_ids)
    uniq = np.unique(rid)
    if uniq.size >= MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP and block is None:
        rows = [(k[rid == u].sum(), float((rid == u).sum()), s[rid == u].sum()) for u in uniq]
        return np.asarray(rows, dtype=float), "request"
    size = block or max(10, int(np.sqrt(max(k.size, 1))))
    rows = []
    for u in uniq:
        idx = np.flatnonzero(rid == u)
        for start in range(0, idx.size, size):
            sel = idx[start : start + size]
            rows.append((k[sel].sum(), float(sel.size), s[sel].sum()))
    return np.asarray(rows, dtype=float).reshape(-1, 3), "block"


def _resampled_totals(rows: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, 3) totals of n bootstrap resamples of the unit rows."""
    idx = rng.integers(0, rows.shape[0], size=(n, rows.shape[0]))
    return rows[idx].sum(axis=1)


def _interval(x: np.ndarray, level: float = CI_LEVEL) -> tuple[float, float]:
    lo, hi = np.nanquantile(x, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def tps_ci(
    rows: np.ndarray, *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> dict[str, tuple[float, float]]:
    """Bootstrap CIs of decode tps, mean commit length and mean step time of one set of units."""
    rng = np.random.default_rng(seed)
    t = _resampled_totals(rows, resamples, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "decode_tps": _interval(t[:, 0] / t[:, 2]),
            "mean_commit_len": _interval(t[:, 0] / t[:, 1]),
            "mean_step_s": _interval(t[:, 2] / t[:, 1]),
        }


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
    tb = _resampled_totals(baseline_rows, resamples, rng)
    to = _resampled_totals(observed_rows, resamples, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        acc = (tb[:, 0] / tb[:, 1]) / (to[:, 0] / to[:, 1])
        stf = (to[:, 2] / to[:, 1]) / (tb[:, 2] / tb[:, 1])
    return SplitCI(
        point=point,
        tps_ratio=_interval(acc * stf),
        acceptance_factor=_interval(acc),
        step_time_factor=_interval(stf),
        resamples=resamples,
        unit=unit,
    )
