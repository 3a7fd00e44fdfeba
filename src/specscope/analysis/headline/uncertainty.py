"""95% intervals by resampling: the one place specscope's bootstraps live. Pure: no I/O.

Two resampling units, named in every interval's `method`:
- `request`: whole requests are independent draws of the workload, so with enough of them
  (MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP) they are resampled with replacement;
- `block`: with few requests (one long generation is the common case) the steps of each request
  are cut into contiguous blocks of ~sqrt(n) steps (at least MIN_BLOCK_STEPS) and the blocks are
  resampled: consecutive steps are correlated (same context, same draft luck), so single steps
  would give intervals that are too narrow.

Ratios of totals (tokens / seconds, tokens / steps, seconds / steps) are bootstrapped by
resampling unit rows of (tokens, steps, seconds) and recomputing the ratio of the summed
columns, which is what the point estimate is. A median (TTFT) uses scipy.stats.bootstrap.
Every resample is seeded: the same data gives the same interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CI_LEVEL = 0.95
DEFAULT_RESAMPLES = 1000  # each resample is one vectorised sum: ~1 ms for 1000
# Fewer requests than this and a request bootstrap is too coarse (a handful of distinct values).
MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP = 8
MIN_BLOCK_STEPS = 10


@dataclass(frozen=True)
class Interval95:
    """A 95% interval and how it was obtained (e.g. "bootstrap over 12 requests")."""

    low: float
    high: float
    method: str

    def as_list(self) -> list[float]:
        return [self.low, self.high]


def unit_rows(
    commit_len: np.ndarray | Sequence[float],
    step_s: np.ndarray | Sequence[float],
    request_ids: np.ndarray | Sequence[int],
    *,
    block: int | None = None,
) -> tuple[np.ndarray, str]:
    """Rows of (tokens, steps, seconds) per resampling unit, and the unit's name.

    Requests when there are enough of them (and no block size is forced), else contiguous blocks
    of steps within each request (a non-overlapping block bootstrap). Column totals are always
    the totals of the input steps.
    """
    k = np.asarray(commit_len, dtype=float)
    s = np.asarray(step_s, dtype=float)
    rid = np.asarray(request_ids)
    uniq = np.unique(rid)
    if uniq.size >= MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP and block is None:
        rows = [(k[rid == u].sum(), float((rid == u).sum()), s[rid == u].sum()) for u in uniq]
        return np.asarray(rows, dtype=float).reshape(-1, 3), "request"
    size = block or max(MIN_BLOCK_STEPS, int(np.sqrt(max(k.size, 1))))
    rows = []
    for u in uniq:
        idx = np.flatnonzero(rid == u)
        for start in range(0, idx.size, size):
            sel = idx[start : start + size]
            rows.append((k[sel].sum(), float(sel.size), s[sel].sum()))
    return np.asarray(rows, dtype=float).reshape(-1, 3), "block"


def describe(unit: str, n_units: int) -> str:
    """The method sentence a report prints beside an interval."""
    what = "requests" if unit == "request" else "blocks of consecutive steps"
    return f"{CI_LEVEL:.0%} percentile bootstrap over {n_units} {what}"


def resampled_totals(rows: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, columns) column totals of n bootstrap resamples of the unit rows."""
    idx = rng.integers(0, rows.shape[0], size=(n, rows.shape[0]))
    return rows[idx].sum(axis=1)


def percentile_interval(x: np.ndarray, level: float = CI_LEVEL) -> tuple[float, float]:
    lo, hi = np.nanquantile(x, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def totals_intervals(
    rows: np.ndarray, unit: str, *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> dict[str, Interval95] | None:
    """Intervals of decode tps (tokens / seconds), mean commit length (tokens / steps) and mean
    step time (seconds / steps) of one set of (tokens, steps, seconds) unit rows. None with
    fewer than two units: resampling one unit gives a point, not an interval."""
    rows = np.asarray(rows, dtype=float).reshape(-1, 3)
    if rows.shape[0] < 2:
        return None
    t = resampled_totals(rows, resamples, np.random.default_rng(seed))
    method = describe(unit, rows.shape[0])
    out: dict[str, Interval95] = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        pairs = {"decode_tps": (0, 2), "mean_commit_len": (0, 1), "mean_step_s": (2, 1)}
        for name, (num, den) in pairs.items():
            if rows[:, den].sum() > 0:
                out[name] = Interval95(*percentile_interval(t[:, num] / t[:, den]), method)
    return out


def median_interval(
    values: Sequence[float], *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> Interval95 | None:
    """Percentile-bootstrap interval of the median (scipy.stats.bootstrap); None with fewer
    than two values. Identical values give a zero-width interval (scipy cannot resample them)."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if v.size < 2:
        return None
    method = f"{CI_LEVEL:.0%} percentile bootstrap of the median over {v.size} requests"
    if np.ptp(v) == 0:
        return Interval95(float(v[0]), float(v[0]), method)
    res = stats.bootstrap(
        (v,),
        np.median,
        n_resamples=resamples,
        confidence_level=CI_LEVEL,
        method="percentile",
        random_state=np.random.default_rng(seed),
        vectorized=True,
    )
    return Interval95(
        float(res.confidence_interval.low), float(res.confidence_interval.high), method
    )
