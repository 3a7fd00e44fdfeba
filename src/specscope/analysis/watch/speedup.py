"""Speculation's speedup per window: how many times faster the canary decodes with speculation
than the same server would without it, from a recorded plain (non-speculative) run.

speedup = commit length x plain step time / speculative step time (ARCHITECTURE §1: tps = commit
length / step time, and a plain step commits one token), i.e. the window's decode rate over the
plain run's. Both step times come from the same estimator (window.py's step-weighted mean over
every timed step of the canaries, or of the plain run's requests), so the ratio compares like
with like; the plain run must use the canary's prompt and output lengths (a step's time depends
on its context).

The interval is propagated on the log scale (delta method): the window's decode-rate interval
already carries the commit length's and the step time's relative standard errors in quadrature
(window.py), and the plain step time's relative standard error is added to them, the window and
the plain run being independent measurements. `pays` is True when the whole interval lies
above 1, False when it lies below 1 ("speculation is not paying"), None when it straddles 1
(the data cannot tell)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specscope.analysis.watch.baseline import MIN_BASELINE, PLAIN_COMMIT
from specscope.analysis.watch.sample import CanarySample
from specscope.analysis.watch.window import Z95, WindowFigures, window_figures


@dataclass(frozen=True)
class PlainReference:
    """The plain run's step time (mean over its steps, with the window's interval method)."""

    step_s: float
    step_s_ci: tuple[float, float]
    commit_len: float | None  # what its steps committed (1.0 for plain decoding)
    requests: int
    steps: int
    source: str  # the run directory

    @property
    def log_se(self) -> float:
        """The relative standard error of step_s (its interval is normal: mean +- Z95 x se)."""
        lo, hi = self.step_s_ci
        return (hi - lo) / (2 * Z95 * self.step_s)


@dataclass(frozen=True)
class Speedup:
    value: float
    ci: tuple[float, float]
    pays: bool | None  # True: interval above 1; False: below 1; None: straddles 1


class PlainReferenceError(ValueError):
    """The samples give no plain reference; the message says why in one line."""


def plain_reference(samples: Sequence[CanarySample], source: str) -> PlainReference:
    """The plain reference of a recorded run's requests (each read as a canary). Refused when
    fewer than MIN_BASELINE requests give a sample, or when its steps committed more than
    PLAIN_COMMIT tokens on average (it speculated: its step time is not a plain step's)."""
    if len(samples) < MIN_BASELINE:
        raise PlainReferenceError(
            f"{len(samples)} usable requests, a plain reference needs at least {MIN_BASELINE}"
        )
    f = window_figures(samples)
    if f.mean_commit_len is not None and f.mean_commit_len > PLAIN_COMMIT:
        raise PlainReferenceError(
            f"its requests committed {f.mean_commit_len:.2f} tokens per step: it speculated "
            f"(a plain run commits at most {PLAIN_COMMIT})"
        )
    assert f.mean_step_s is not None and f.mean_step_s_ci is not None  # samples is not empty
    return PlainReference(
        f.mean_step_s, f.mean_step_s_ci, f.mean_commit_len, f.canaries, f.steps, source
    )


def _rel_se(value: float, ci: tuple[float, float]) -> float:
    """A figure's relative standard error from its 95% interval (window.py's log-symmetric
    decode-rate interval: value x exp(+-Z95 x rel))."""
    return math.log(ci[1] / value) / Z95


def speedup(f: WindowFigures, plain: PlainReference) -> Speedup | None:
    """The window's speedup over the plain reference; None when no reliable canary ended in it
    (no commit length, so no decode rate)."""
    if f.decode_tps is None or f.decode_tps_ci is None or f.decode_tps <= 0:
        return None
    value = f.decode_tps * plain.step_s
    rel = math.hypot(_rel_se(f.decode_tps, f.decode_tps_ci), plain.log_se)
    ci = (value * math.exp(-Z95 * rel), value * math.exp(Z95 * rel))
    pays = True if ci[0] > 1.0 else False if ci[1] < 1.0 else None
    return Speedup(value, ci, pays)
