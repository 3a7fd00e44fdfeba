"""The baseline a watch compares against: per-canary log commit length and log step time (mean
and spread), learned over the warm-up or from a recorded run's requests.

The spread used to standardise is an upper confidence bound of the sample's (a chi-square
bound at UPPER_Q over n-1 degrees of freedom) and never below SIGMA_FLOOR: a warm-up of six
canaries can read a spread several times too small, which would turn ordinary variation into
alarms; the bound keeps the stated false-alarm rate a ceiling rather than a hope."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import chi2

from specscope.analysis.watch.sample import CanarySample

UPPER_Q = 0.10  # the spread's bound: chi-square quantile 0.10, i.e. a 90% upper bound
SIGMA_FLOOR = 0.01  # log units: 1% per canary, the least spread ever assumed
MIN_BASELINE = 5  # canaries a baseline needs
PLAIN_COMMIT = 1.05  # a commit length at or below this is plain decoding (steps.speculation)


@dataclass(frozen=True)
class Series:
    """One factor's baseline on the log scale."""

    mean: float
    sd: float  # the sample's own spread
    sd_eff: float  # the bound used to standardise
    n: int

    def z(self, x: float) -> float:
        return (x - self.mean) / self.sd_eff


@dataclass(frozen=True)
class Baseline:
    commit: Series  # log commit length (reliable canaries)
    step: Series  # log step time
    commit_trend: Series  # log(second half / first half) of commit length
    step_trend: Series  # the same of step time
    speculating: bool  # the baseline drafts (commit length above PLAIN_COMMIT)
    source: str  # "warm-up" | the run directory it came from
    t_end: float  # when it was learned (the last sample's time)


def _series(values: Sequence[float]) -> Series:
    n = len(values)
    sd = statistics.stdev(values) if n >= 2 else 0.0
    bound = sd * math.sqrt((n - 1) / chi2.ppf(UPPER_Q, n - 1)) if n >= 2 else sd
    return Series(statistics.fmean(values), sd, max(bound, SIGMA_FLOOR), n)


def learn_baseline(samples: Sequence[CanarySample], source: str = "warm-up") -> Baseline | None:
    """The baseline of these samples; None with fewer than MIN_BASELINE (reliable for commit
    length: a commit length read off merged chunks is not a step's)."""
    reliable = [s for s in samples if s.reliable]
    if len(samples) < MIN_BASELINE or len(reliable) < MIN_BASELINE:
        return None
    commit = _series([s.log_commit for s in reliable])
    return Baseline(
        commit=commit,
        step=_series([s.log_step for s in samples]),
        commit_trend=_series([s.commit_trend for s in reliable]),
        step_trend=_series([s.step_trend for s in samples]),
        speculating=math.exp(commit.mean) > PLAIN_COMMIT,
        source=source,
        t_end=max(s.t for s in samples),
    )
