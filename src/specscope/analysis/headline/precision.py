"""Enough data, adaptively: is decode tps known to the precision asked, and if not, how many more
requests of the measurement that decides it are needed? Pure: no I/O.

The figure is the headline's decode tps and its 95% interval (analysis.headline), so the
precision the report prints is the precision the decision used. Precision is a relative
half-width: (high - low) / 2 / decode_tps, e.g. 0.05 for +-5%.

It counts as reached only when the interval is over requests (at least
MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP of them). With fewer, the headline resamples blocks of
steps within the requests, and that interval does not see how much the rate moves from one
prompt to the next (content changes acceptance): on the twin with realistic noise, 1-6 requests
gave 95% block intervals that covered the true rate in only 50-70% of runs, 8-16 requests
83-100% (bench/precision.py prints this). Below that count the decision plans up to it, and
past it as far as the spread between requests says is needed.

Requests needed, from the current data:
- interval over requests: the half-width shrinks as 1/sqrt(n), so n * (reached / target)^2;
- fewer requests (n >= 2): the ratio estimator's per-request spread cv (relative standard
  deviation of tokens - rate * seconds over mean seconds) gives (1.96 cv / target)^2;
- one request: no spread yet; the request-interval minimum.
A loop that stops when an interval happens to read narrow stops on intervals that cover the
truth less often than a fixed count's. So the stop rule asks two things: the Student-t
half-width t(n-1) cv / sqrt(n) must be within the target as well as the bootstrap one (the
count needed takes the larger of the two), and the loop never stops on precision before the
largest count an earlier reading asked for (`committed`). Over 100 twin runs at a +-5% target
the intervals it stopped on covered the true rate in 87% of runs with the t check alone and
92% with both (a fixed 24 requests: 91%).
A round never more than doubles the requests already made once past the minimum: a variance
read off a few requests is itself noisy, so the next round re-reads it before spending more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from specscope.analysis.headline.headline import headline
from specscope.analysis.headline.measure import reconstruct
from specscope.analysis.headline.uncertainty import (
    CI_LEVEL,
    MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP,
    describe,
)
from specscope.trace.model import RequestTrace

Z = float(stats.norm.ppf(0.5 + CI_LEVEL / 2))  # 1.96 for the headline's 95% intervals

# How the loop ended (the report's `stopped_by`).
PRECISION = "precision"  # the interval over requests is as narrow as asked
BUDGET = "budget"  # the next request would not fit the time or token budget
MAX_REQUESTS = "max_requests"  # the request cap was reached
NO_DATA = "no_data"  # no request with a decode window: nothing to judge
ERRORS = "errors"  # the server stopped answering during the repeats
INTERRUPTED = "interrupted"  # Ctrl-C during the repeats
OFF = "off"  # --precision 0: only the plan's repeats
# Requests of the measurement (failed ones included) tried before a reading with no decode window
# stops the loop. A window needs two token-bearing reads, and a request can end with one: its
# server merged every event of the generation into one (vLLM's front end does when its loop
# falls behind its engine; CI saw a 64-token n-gram generation arrive whole) or this client read
# late. That is a moment's state, not the server's; a server that always sends whole answers
# costs two requests more.
NO_WINDOW_TRIES = 3
STOPPED_BY = (PRECISION, BUDGET, MAX_REQUESTS, NO_DATA, ERRORS, INTERRUPTED, OFF)


@dataclass(frozen=True)
class Reading:
    """What the requests so far say about decode tps and its precision."""

    requests: int  # requests with a decode window
    decode_tps: float | None
    ci: tuple[float, float] | None
    over_requests: bool  # the interval resamples requests (not blocks of steps)
    request_cv: float | None  # relative sd between requests (ratio estimator); None below 2

    @property
    def relative_half_width(self) -> float | None:
        return relative_half_width(self.decode_tps, self.ci)

    @property
    def t_half_width(self) -> float | None:
        """Student-t relative half-width from the spread between requests, t(n-1) cv / sqrt(n):
        a second reading of the same precision that the stop rule also asks for (see
        `decide`)."""
        if self.request_cv is None or self.requests < 2:
            return None
        return (
            float(stats.t.ppf(0.5 + CI_LEVEL / 2, self.requests - 1))
            * self.request_cv
            / math.sqrt(self.requests)
        )


@dataclass(frozen=True)
class Budget:
    """What the repeats may spend beyond the plan: seconds, generated tokens (None: no limit),
    and the most requests of the measurement in all."""

    seconds: float | None
    tokens: int | None
    max_requests: int


@dataclass(frozen=True)
class Decision:
    more: int  # requests to send next (0 when stopping)
    stopped_by: str | None  # one of STOPPED_BY when stopping, else None
    needed: int | None  # requests in all that the data says the target needs
    reason: str


def relative_half_width(value: float | None, ci: Sequence[float | None] | None) -> float | None:
    """(high - low) / 2 / |value|; None without a value or both bounds."""
    if value is None or not ci or len(ci) != 2 or ci[0] is None or ci[1] is None or value == 0:
        return None
    return (float(ci[1]) - float(ci[0])) / 2.0 / abs(float(value))


def request_cv(windows: Sequence[tuple[float, float]]) -> float | None:
    """Relative sd between requests of the token-weighted rate sum(tokens) / sum(seconds): the
    sd of each request's residual tokens - rate * seconds over the mean seconds and the rate
    (the ratio estimator's linearisation). None with fewer than two requests."""
    if len(windows) < 2:
        return None
    tok = np.asarray([w[0] for w in windows], dtype=float)
    sec = np.asarray([w[1] for w in windows], dtype=float)
    if sec.sum() <= 0 or tok.sum() <= 0:
        return None
    rate = tok.sum() / sec.sum()
    resid = tok - rate * sec
    return float(np.std(resid, ddof=1) / sec.mean() / rate)


def reading(traces: Sequence[RequestTrace], *, seed: int = 0) -> Reading:
    """The headline's decode tps and interval over these requests (failed ones left out), as
    the report will print them, and the spread between them."""
    ok = [t for t in traces if t.ok and t.decode_window() is not None]
    if not ok:
        return Reading(0, None, None, False, None)
    head = headline(ok, [reconstruct(t) for t in ok], seed=seed)
    ci = head.decode_tps_ci
    windows = [t.decode_window() for t in ok]
    return Reading(
        requests=head.requests,
        decode_tps=head.decode_tps,
        ci=(ci.low, ci.high) if ci is not None else None,
        over_requests=ci is not None and ci.method == describe("request", head.requests),
        request_cv=request_cv([w for w in windows if w is not None]),
    )


def requests_needed(r: Reading, target: float) -> int:
    """Requests in all that should bring the interval over requests to `target` (see the
    module docstring for the rule); never below the request-interval minimum."""
    if target <= 0:
        raise ValueError("target must be > 0")
    floor = MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP
    hw = r.relative_half_width
    if r.over_requests and hw is not None:
        by_t = r.requests * (r.t_half_width / target) ** 2 if r.t_half_width is not None else 0
        return max(floor, _ceil(r.requests * (hw / target) ** 2), _ceil(by_t))
    if r.request_cv is not None:
        return max(floor, _ceil((Z * r.request_cv / target) ** 2))
    return floor


def _ceil(x: float) -> int:
    """Ceiling that does not round 40.000000000001 (a float's error) up to 41."""
    return math.ceil(x - 1e-9)


def affordable(
    budget: Budget,
    done: int,
    spent_s: float,
    spent_tokens: int,
    seconds_per_request: float,
    tokens_per_request: int,
) -> tuple[int, str]:
    """How many more requests fit what is left, and which limit binds (BUDGET or MAX_REQUESTS)."""
    fits: list[tuple[int, str]] = [(budget.max_requests - done, MAX_REQUESTS)]
    if budget.seconds is not None:
        left = budget.seconds - spent_s
        fits.append(
            (math.floor(left / seconds_per_request) if seconds_per_request > 0 else 0, BUDGET)
        )
    if budget.tokens is not None and tokens_per_request > 0:
        fits.append(((budget.tokens - spent_tokens) // tokens_per_request, BUDGET))
    n, why = min(fits, key=lambda x: x[0])
    return max(0, n), why


def decide(
    r: Reading,
    target: float,
    budget: Budget,
    *,
    attempted: int | None = None,
    committed: int = 0,
    spent_s: float = 0.0,
    spent_tokens: int = 0,
    seconds_per_request: float,
    tokens_per_request: int,
) -> Decision:
    """Stop (and why) or how many more requests to send, from the reading and what the budget
    has left. `attempted`: requests of the measurement sent so far, failed ones included (the
    request cap counts them; default the reading's); `seconds_per_request`: the measured mean
    wall time of one; `committed`: the most requests an earlier reading said were needed (the
    loop does not stop on precision before it has them)."""
    done = r.requests if attempted is None else attempted
    fit, limit = affordable(
        budget, done, spent_s, spent_tokens, seconds_per_request, tokens_per_request
    )
    if r.decode_tps is None:
        return _without_window(done, fit, limit)
    hw, hw_t = r.relative_half_width, r.t_half_width
    if (
        r.over_requests
        and r.requests >= committed
        and hw is not None
        and hw <= target
        and (hw_t is None or hw_t <= target)
    ):
        return Decision(
            0, PRECISION, r.requests, f"+-{hw:.1%} over {r.requests} requests <= +-{target:.1%}"
        )
    needed = max(requests_needed(r, target), committed)
    more = max(1, needed - r.requests)
    if r.requests >= MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP:
        more = min(more, r.requests)  # at most double per round: re-read the spread first
    if fit <= 0:
        what = "the request cap" if limit == MAX_REQUESTS else "the budget"
        return Decision(
            0,
            limit,
            needed,
            f"{needed} requests needed for +-{target:.1%}; "
            f"{what} allows no more after {r.requests}",
        )
    more = min(more, fit)
    return Decision(
        more,
        None,
        needed,
        f"{needed} requests needed for +-{target:.1%}; {r.requests} so far, {more} more",
    )


def _without_window(done: int, fit: int, limit: str) -> Decision:
    """No request of the measurement has a decode window yet (`done` tried; `fit` more
    affordable, `limit` the binding one): one more while fewer than NO_WINDOW_TRIES were
    tried and the budget has room for it; else stop, nothing to judge."""
    if done < NO_WINDOW_TRIES and fit > 0:
        return Decision(
            1,
            None,
            None,
            f"no request with a decode window in {done}: one more, up to {NO_WINDOW_TRIES}",
        )
    what = "the request cap" if limit == MAX_REQUESTS else "the budget"
    why = f"{NO_WINDOW_TRIES} tried" if done >= NO_WINDOW_TRIES else f"{what} allows no more"
    return Decision(
        0, NO_DATA, None, f"no request with a decode window in {done} ({why}): nothing to judge"
    )


def summary(
    recorded: dict | None,
    decode_tps: float | None,
    decode_tps_ci: Sequence[float | None] | None,
    requests: int,
) -> dict | None:
    """The report's `precision` object: what the repeats aimed for and spent (`recorded`, the
    run's run.json `precision`) beside what the final headline reached. None for a run that
    had no precision target (a probe without --precision, an older run)."""
    if not recorded:
        return None
    target = recorded.get("target")
    reached = relative_half_width(decode_tps, decode_tps_ci)
    # the headline's tps interval resamples requests from this many on (uncertainty.unit_rows)
    over = reached is not None and requests >= MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP
    return {
        "target": target if target else None,
        "reached": reached,
        "requests": requests,
        "stopped_by": recorded.get("stopped_by") or INTERRUPTED,
        "over_requests": over,
        "needed": recorded.get("needed"),
        "added_requests": recorded.get("added_requests", 0),
        "budget_s": recorded.get("budget_s"),
        "budget_tokens": recorded.get("budget_tokens"),
        "spent_s": recorded.get("spent_s"),
        "spent_tokens": recorded.get("spent_tokens"),
        "reason": recorded.get("reason", ""),
    }
