"""The one-sided CUSUM (Page 1954) on standardised observations, and the threshold that gives
a stated false-alarm rate.

Why CUSUM and not a library: neither river (online drift detectors) nor ruptures (offline
change points) is installed, and what the watch needs is small and exactly specified: a
sequential test per factor whose in-control run length can be stated in advance (Siegmund's
approximation, below) and then checked by simulation (bench/watch_detection.py). river's
detectors (ADWIN, Page-Hinkley) state a confidence per test, not a run length per day, and
ruptures re-analyses a whole series offline; either would be a new dependency for less.

The statistic: S_0 = 0, S_n = max(0, S_{n-1} + z_n - k), an alarm when S_n > h, with z_n the
observation standardised against the baseline and k half the smallest shift of interest, in
the same units. Each step's increment z_n - k is capped at STEP_CAP and h is at least
MIN_STEPS_TO_ALARM caps, so one wild canary (a stalled request, a neighbour's burst) can
never raise an alarm alone, however small the baseline's spread."""

from __future__ import annotations

import math
from dataclasses import dataclass

STEP_CAP = 3.0
MIN_STEPS_TO_ALARM = 1.5  # in caps: h >= 1.5 caps, so an alarm takes two observations
# Siegmund's correction of the threshold for the overshoot of a normal random walk.
_OVERSHOOT = 1.166


def arl0(k: float, h: float) -> float:
    """In-control average run length (observations to a false alarm) of a one-sided CUSUM on
    N(0, 1) data with reference k > 0 and threshold h (Siegmund's approximation)."""
    b = h + _OVERSHOOT
    return (math.exp(2 * k * b) - 2 * k * b - 1) / (2 * k * k)


def threshold_for(k: float, target_arl0: float) -> float:
    """The smallest h whose in-control run length reaches `target_arl0` (bisection on the
    monotone `arl0`), never below the two-observation floor."""
    lo, hi = 0.0, 1.0
    while arl0(k, hi) < target_arl0:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if arl0(k, mid) < target_arl0 else (lo, mid)
    return max(hi, MIN_STEPS_TO_ALARM * STEP_CAP)


@dataclass
class Cusum:
    """One one-sided CUSUM. `sign` +1 detects an increase of the raw series, -1 a decrease.
    `since` is the index of the first observation after the statistic last stood at 0 (the
    change-point estimate when it alarms)."""

    k: float
    h: float
    sign: int = 1
    value: float = 0.0
    n: int = 0
    since: int = 0

    def update(self, z: float) -> bool:
        """Feed one standardised observation; True when the statistic crosses h."""
        self.value = max(0.0, self.value + min(STEP_CAP, self.sign * z - self.k))
        self.n += 1
        if self.value == 0.0:
            self.since = self.n
        return self.value > self.h

    def reset(self) -> None:
        self.value = 0.0
        self.since = self.n
