"""Breakeven: the concurrency and the context at which speculation stops paying. Pure: no I/O.

A speculative run is compared with a baseline run (plain decoding, or another speculative
config), each with sweeps. Rather than reading the nearest sweep point, each run's steps are
fitted with the step-time model of continuous batching, where one step serves the whole batch:

    step time      s(B, c) = s0 + a*B*c + beta*B      (a: attention over every request's own
                                                      context; beta: what one more request in the
                                                      batch costs: its verified tokens' share of
                                                      the pass)
    commit length  L(B, c) = poly(log2 B) + lc*c      (degree up to 3; acceptance may fall with
                                                      batch: shared drafter capacity; or with
                                                      context: the drafter's window)

and a request's decode rate is r(B, c) = L / s. The breakeven concurrency is where this run's r
meets the baseline's at the sweep's context (the context breakeven: where they meet at batch 1
over the context sweep). The batch a step ran in is read from the client's own timestamps: the
requests whose decode windows span the step's midpoint. Intervals: percentile bootstrap over
requests (resampled within each sweep point of each run, both runs independently), refitting and
re-solving every time (analysis.uncertainty's percentile rule).

"No crossover in [range]" is a result: with the extrapolated point when the fitted model puts one
within EXTRAPOLATE x the measured range. The loss at the largest measured batch (or context) is
split exactly into two factors, the speculative run's step time growing faster than the
baseline's, and its commit length falling (relative to the baseline's), and the policy that would
have given the best of both is stated with the engines' flags and its predicted gain.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from specscope.analysis.fits.steptime import KTOK
from specscope.analysis.headline.measure import Measured, concurrency_of
from specscope.analysis.headline.uncertainty import CI_LEVEL, percentile_interval
from specscope.analysis.steps.speculation import plain_decoding
from specscope.trace import tags

EXTRAPOLATE = 2.0  # report a model crossover up to 2x beyond the measured range, labelled
GRID = 400  # points the crossing is searched on (then refined linearly between two)
DEFAULT_RESAMPLES = 200  # each resample refits two small least-squares models (~1 ms)
MIN_STEPS = 12
# Batch steps per bootstrap block, at least: fewer than analysis.uncertainty's 10 single-request
# steps, because one batch step already holds every running request's step
MIN_BLOCK_STEPS = 3
MIN_CONTEXT_SPREAD = 64  # tokens of prompt-length spread before a context crossover is fitted
STEP_COVERAGE = 0.9  # a request's steps must hold 90% of its decode-window tokens to be fitted
MATERIAL_LOSS = 0.9  # factors are given when the advantage falls by a tenth or more
MATERIAL_GAIN = 0.05  # a policy change is suggested for a predicted gain of 5% or more

# Where each engine has the setting (looked up in their docs; "none" stated where there is none).
FLAGS_BATCH_OFF = (
    "vLLM: `disable_by_batch_size` in --speculative-config (V0 engine: "
    "--speculative-disable-by-batch-size; check that your V1 release honours it); SGLang: no "
    "batch-size switch among its server arguments (the fallback PR sgl-project/sglang#13376 was "
    "closed): route high-load traffic to a plain server; llama.cpp: none (per slot only)"
)
FLAGS_FEWER_DRAFTS = (
    "SGLang: --speculative-num-draft-tokens / --speculative-num-steps / "
    "--speculative-eagle-topk (its adaptive speculative decoding lowers the steps with load, "
    "EAGLE with topk 1 only); vLLM: `num_speculative_tokens` in --speculative-config; "
    "llama.cpp: --draft-max (and --draft-p-min to draft only confident tokens)"
)
FLAGS_CONTEXT_OFF = (
    "vLLM: `max_model_len` in --speculative-config (V0: --speculative-max-model-len): longer "
    "sequences skip speculation; SGLang: none; llama.cpp: none"
)


@dataclass(frozen=True)
class RunSteps:
    """One run's reliable client steps as columns, with the batch each step ran in."""

    commit: np.ndarray
    step_s: np.ndarray
    context: np.ndarray
    prompt: np.ndarray  # context - output position: what a context sweep varies
    batch: np.ndarray
    # True where max_tokens could not cut the step: more tokens left than any step committed.
    # (Dropping only each request's last step would bias the commit length low: a step is last
    # because it drew a long commit.)
    full: np.ndarray
    units: tuple[tuple[np.ndarray, ...], ...]  # per sweep point: step indices of each block
    levels: tuple[int, ...]  # concurrency sweep levels of the run

    @property
    def n(self) -> int:
        return int(self.commit.size)


def time_blocks(
    t_mid: np.ndarray, strata: np.ndarray, batch: np.ndarray
) -> tuple[tuple[np.ndarray, ...], ...]:
    """The bootstrap's units: within each sweep point, blocks of consecutive batch steps.

    Requests stepped together share every step's duration, so at concurrency C the C requests'
    steps are one draw, not C: the unit is a stretch of time (all requests' steps in it), not a
    request. Each point's steps are cut at time edges into blocks of about n^(1/3) batch steps
    (the block length that is rate-optimal for a bootstrap variance, Hall, Horowitz & Jing
    1995), at least MIN_BLOCK_STEPS; steps of one batch step share a time and so a block. A
    sweep point has a few dozen batch steps: sqrt(n) blocks would leave too few blocks to
    resample."""
    out = []
    for st in np.unique(strata):
        idx = np.flatnonzero(strata == st)
        batch_steps = max(1, round(float(np.sum(1.0 / batch[idx]))))
        size = max(MIN_BLOCK_STEPS, round(batch_steps ** (1 / 3)))
        n_blocks = max(1, batch_steps // size)
        edges = np.quantile(t_mid[idx], np.linspace(0, 1, n_blocks + 1)[1:-1])
        which = np.searchsorted(edges, t_mid[idx], side="right")
        out.append(tuple(idx[which == b] for b in np.unique(which)))
    return tuple(out)


def _windows(m: Measured) -> list[tuple[int, int, int]]:
    """(request index, first token chunk ns, last chunk ns) of every successful request."""
    out = []
    for r in m.ok:
        tc = [c.t_ns for c in r.chunks if c.n_tokens > 0]
        if len(tc) >= 2:
            out.append((r.index, tc[0], tc[-1]))
    return out


def run_steps(m: Measured) -> RunSteps | None:
    """The steps the fits use: every reliable, client-timed step but the calibration request's,
    each with the number of requests decoding at its midpoint (its batch)."""
    wins = _windows(m)
    starts = np.asarray([w[1] for w in wins], dtype=float)
    ends = np.asarray([w[2] for w in wins], dtype=float)
    cols: dict[str, list[float]] = {k: [] for k in ("k", "s", "c", "p", "b", "t", "left")}
    strata: list[str] = []
    levels: set[int] = set()
    for r in m.ok:
        rec = m.recs[r.index]
        if r.spec.tag == tags.CALIBRATION or not (rec.reliable and rec.timed_by_client):
            continue
        window = r.decode_window()
        if window is None or sum(st.commit_len for st in rec.steps) < STEP_COVERAGE * window[0]:
            continue  # the steps do not account for the stream's tokens: not usable as steps
        levels.add(concurrency_of(r))
        for s in rec.steps:
            mid = s.t_end_ns - s.step_s * 5e8
            batch = int(np.sum((starts <= mid) & (ends >= mid))) or 1
            cols["k"].append(s.commit_len)
            cols["s"].append(s.step_s)
            cols["c"].append(float(s.context_len or 0))
            cols["p"].append(float((s.context_len or 0) - s.output_pos))
            cols["b"].append(batch)
            cols["t"].append(mid)
            cols["left"].append(float(r.spec.max_tokens - s.output_pos))
            strata.append(r.spec.tag)
    if len(cols["k"]) < MIN_STEPS:
        return None
    arr = {k: np.asarray(v, dtype=float) for k, v in cols.items()}
    ok = np.isfinite(arr["s"]) & (arr["s"] > 0)
    units = time_blocks(arr["t"][ok], np.asarray(strata)[ok], arr["b"][ok])
    return RunSteps(
        arr["k"][ok],
        arr["s"][ok],
        arr["c"][ok],
        arr["p"][ok],
        arr["b"][ok],
        arr["left"][ok] >= arr["k"].max(),
        units,
        tuple(sorted(levels)),
    )


@dataclass(frozen=True)
class RateModel:
    """One run's fitted step time and commit length as functions of batch and context."""

    step: tuple[float, float, float]  # s0, a (per 1000 context tokens of the batch), beta
    commit: tuple[float, ...]  # polynomial in log2 batch (constant first), then lc per 1000 tokens
    x_max: float  # log2 of the largest batch measured: beyond it the polynomial goes on linearly
    commit_max: float  # the largest mean commit length seen: the fit is never extrapolated above

    def step_s(self, b: np.ndarray | float, c: np.ndarray | float) -> np.ndarray:
        s0, a, beta = self.step
        b = np.asarray(b)
        return np.maximum(s0 + a * b * np.asarray(c) / KTOK + beta * b, 1e-9)

    def commit_len(self, b: np.ndarray | float, c: np.ndarray | float) -> np.ndarray:
        *poly, lc = self.commit
        x = np.log2(np.maximum(np.asarray(b, dtype=float), 1.0))
        p = np.polynomial.Polynomial(poly)
        inside = np.minimum(x, self.x_max)
        edge_slope = p.deriv()(self.x_max) if len(poly) > 1 else 0.0
        val = p(inside) + edge_slope * (x - inside) + lc * np.asarray(c) / KTOK
        return np.clip(val, 1.0, self.commit_max)

    def rate(self, b: np.ndarray | float, c: np.ndarray | float) -> np.ndarray:
        return self.commit_len(b, c) / self.step_s(b, c)


def _lstsq(cols: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    """Least squares over the columns that vary (a constant column gets coefficient 0)."""
    use = [0] + [i for i, c in enumerate(cols) if i > 0 and np.ptp(c) > 0]
    beta, *_ = np.linalg.lstsq(np.column_stack([cols[i] for i in use]), y, rcond=None)
    out = np.zeros(len(cols))
    out[use] = beta
    return out


def fit_rate_model(rs: RunSteps, idx: np.ndarray | None = None) -> RateModel | None:
    """Least-squares fits of step time (linear in batch and in the batch's total context, read
    as batch x the step's own context since a sweep's requests have one shape: one pass over the
    batch, whose attention reads every request's context) and commit length (a polynomial in
    log2 batch of degree up to 3, one less than the sweep's levels, so it follows however
    acceptance falls between them; linear in context) over the steps `idx` (all by default)."""
    sel = np.arange(rs.n) if idx is None else idx
    if sel.size < MIN_STEPS:
        return None
    b, c, s = rs.batch[sel], rs.context[sel] / KTOK, rs.step_s[sel]
    st = _lstsq([np.ones_like(b), b * c, b], s)
    full = sel[rs.full[sel]]  # commit length from steps that max_tokens did not cut
    if full.size < MIN_STEPS:
        return None
    b, c, k = rs.batch[full], rs.context[full] / KTOK, rs.commit[full]
    x = np.log2(b)
    degree = max(1, min(3, len(rs.levels) - 1))
    cm = _lstsq([x**d for d in range(degree + 1)] + [c], k)
    by_batch = [k[b == u].mean() for u in np.unique(b)]
    return RateModel(
        (st[0], st[1], st[2]),
        tuple(float(v) for v in cm),
        x_max=float(np.log2(max(rs.levels))),
        commit_max=max(1.0, float(max(by_batch))),
    )


def crossing(x: np.ndarray, gap: np.ndarray, high: float | None = None) -> float | None:
    """Where gap (this run's rate minus the baseline's) falls from > 0 to <= 0 for good,
    linearly interpolated; None without such a fall.

    With `high` (the measured range's end): when this run is behind at `high`, the last fall
    before it (a dip that recovers inside the range is no breakeven: speculation pays again
    above it); when it is ahead at `high`, the first fall beyond it (the extrapolated point)."""

    def fall(i: int) -> float:
        return float(x[i - 1] + (x[i] - x[i - 1]) * gap[i - 1] / (gap[i - 1] - gap[i]))

    falls = [i for i in range(1, x.size) if gap[i - 1] > 0 >= gap[i]]
    if high is None:
        return fall(falls[0]) if falls else None
    end = int(np.searchsorted(x, high, side="right")) - 1
    if gap[end] <= 0:
        inside = [i for i in falls if i <= end]
        return fall(inside[-1]) if inside else None
    beyond = [i for i in falls if i > end]
    return fall(beyond[0]) if beyond else None


@dataclass(frozen=True)
class Axis:
    """One breakeven axis (concurrency or context): the result and the numbers behind it."""

    name: str
    low: float
    high: float  # the measured range
    point: float | None = None  # crossover inside the measured range
    ci: tuple[float | None, float | None] | None = None
    extrapolated: float | None = None  # the model's crossover beyond the range (labelled)
    reason: str | None = None
    advantage_low: float | None = None  # this run's rate / the baseline's at the range's start
    advantage_high: float | None = None  # ... and at its end
    advantage_low_ci: tuple[float, float] | None = None  # over the bootstrap refits
    advantage_high_ci: tuple[float, float] | None = None

    def side(self, end: str) -> str:
        """'ahead', 'behind' or 'level': this run against the baseline at the range's `end`
        ('low' or 'high'), ahead or behind only by a material margin whose interval excludes
        level."""
        v = self.advantage_low if end == "low" else self.advantage_high
        ci = self.advantage_low_ci if end == "low" else self.advantage_high_ci
        if v is None:
            return "level"
        if v >= 1 + MATERIAL_GAIN and (ci is None or ci[0] > 1):
            return "ahead"
        if v <= 1 / (1 + MATERIAL_GAIN) and (ci is None or ci[1] < 1):
            return "behind"
        return "level"

    factors: list[dict[str, Any]] = field(default_factory=list)


# The recommendation when no sweep gives one (a report leaves it out: no data behind it).
NO_POLICY = "Not enough sweep data for a policy."


@dataclass(frozen=True)
class Breakeven:
    concurrency: Axis
    context: Axis
    recommendation: str
    curves: dict[str, Any]
    predicted_gain: float | None = None  # best-of-both policy vs this run at the range's end
    fewer_drafts: FewerDrafts | None = None  # fewer draft tokens at the range's end

    def to_json(self) -> dict[str, Any]:
        def ci(a: Axis) -> list[float | None] | None:
            return None if a.ci is None else [a.ci[0], a.ci[1]]

        reasons = [a.reason for a in (self.concurrency, self.context) if a.reason]
        return {
            "concurrency": self.concurrency.point,
            "concurrency_ci": ci(self.concurrency),
            "concurrency_extrapolated": self.concurrency.extrapolated,
            "concurrency_range": [self.concurrency.low, self.concurrency.high],
            "context": self.context.point,
            "context_ci": ci(self.context),
            "context_extrapolated": self.context.extrapolated,
            "context_range": [self.context.low, self.context.high],
            "reason": "; ".join(reasons) or None,
            "concurrency_reason": self.concurrency.reason,
            "context_reason": self.context.reason,
            "advantage": {
                "at_concurrency_low": self.concurrency.advantage_low,
                "at_concurrency_high": self.concurrency.advantage_high,
                "at_context_low": self.context.advantage_low,
                "at_context_high": self.context.advantage_high,
            },
            "advantage_ci": {
                "at_concurrency_low": _pair(self.concurrency.advantage_low_ci),
                "at_concurrency_high": _pair(self.concurrency.advantage_high_ci),
                "at_context_low": _pair(self.context.advantage_low_ci),
                "at_context_high": _pair(self.context.advantage_high_ci),
            },
            "recommendation": self.recommendation,
            "predicted_gain": self.predicted_gain,
            "fewer_drafts": None if self.fewer_drafts is None else self.fewer_drafts.to_json(),
            "factors": [*self.concurrency.factors, *self.context.factors],
            "interval_method": f"{CI_LEVEL:.0%} percentile bootstrap over blocks of consecutive "
            "batch steps (within each sweep point of both runs), refitting "
            "both models",
        }


def _pair(ci: tuple[float, float] | None) -> list[float] | None:
    return None if ci is None else [ci[0], ci[1]]


def unavailable(
    reason: str = "too few reliable client-timed steps in this run or the "
    "baseline to fit the step-time model",
) -> dict[str, Any]:
    """The `breakeven` object when nothing could be fitted: every number null, and why."""
    return {
        "concurrency": None,
        "concurrency_ci": None,
        "context": None,
        "context_ci": None,
        "reason": reason,
        "recommendation": "",
        "factors": [],
    }


def _resample(rs: RunSteps, rng: np.random.Generator) -> np.ndarray:
    """Step indices of one bootstrap resample: blocks drawn with replacement within each sweep
    point (so every point keeps its weight in the fit)."""
    parts = [blocks[i] for blocks in rs.units for i in rng.integers(0, len(blocks), len(blocks))]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=int)


def _axis_grid(low: float, high: float, log: bool) -> np.ndarray:
    top = high * EXTRAPOLATE
    return np.geomspace(low, top, GRID) if log else np.linspace(low, top, GRID)


def _factors(
    mo: RateModel, mb: RateModel, axis: str, lo: tuple[float, float], hi: tuple[float, float]
) -> list[dict[str, Any]]:
    """The advantage lost from `lo` to `hi` (batch, context) as two exact factors:
    (r_o/r_b at lo) / (r_o/r_b at hi) = step-time factor x acceptance factor."""
    step = (mo.step_s(*hi) / mo.step_s(*lo)) / (mb.step_s(*hi) / mb.step_s(*lo))
    accept = (mo.commit_len(*lo) / mo.commit_len(*hi)) / (mb.commit_len(*lo) / mb.commit_len(*hi))
    step, accept = float(step), float(accept)
    total = np.log(step * accept)
    what = "batch" if axis == "concurrency" else "context"
    span = (
        f"from {what} {lo[0] if axis == 'concurrency' else lo[1]:.0f} to "
        f"{hi[0] if axis == 'concurrency' else hi[1]:.0f}"
    )
    step_name = "verify_cost_with_batch" if axis == "concurrency" else "step_cost_with_context"
    acc_name = "acceptance_with_batch" if axis == "concurrency" else "acceptance_with_context"
    step_text = (
        "this run's step grows faster with batch than the baseline's (each request adds its "
        "verified tokens to the one forward pass: batch x verified tokens)"
        if axis == "concurrency"
        else "this run's step grows faster with context than the baseline's"
    )
    acc_text = (
        "commit length falls with batch (shared drafter capacity)"
        if axis == "concurrency"
        else "commit length falls with context (drafter window)"
    )

    def share(f: float) -> float | None:
        return float(np.log(f) / total) if abs(total) > 1e-9 else None

    return [
        {
            "name": step_name,
            "axis": axis,
            "factor": step,
            "share_of_loss": share(step),
            "description": f"{step_text}, {span}: x{step:.2f} on the advantage",
        },
        {
            "name": acc_name,
            "axis": axis,
            "factor": accept,
            "share_of_loss": share(accept),
            "description": f"{acc_text}, {span}: x{accept:.2f} on the advantage",
        },
    ]


def _solve_axis(
    name: str,
    fits: list[tuple[RateModel, RateModel]],
    low: float,
    high: float,
    at: float,
    log: bool,
) -> tuple[list[float | None], np.ndarray]:
    """Crossings (None: none up to EXTRAPOLATE x high) of every (this, baseline) model pair."""
    x = _axis_grid(low, high, log)
    out: list[float | None] = []
    for mo, mb in fits:
        gap = (
            (mo.rate(x, at) - mb.rate(x, at))
            if name == "concurrency"
            else (mo.rate(1.0, x) - mb.rate(1.0, x))
        )
        if gap[0] <= 0:
            out.append(float("-inf"))  # slower from the start: no breakeven to find
        else:
            out.append(crossing(x, gap, high))
    return out, x


def _advantage(name: str, v: float, pair: tuple[RateModel, RateModel], at: float) -> float:
    """This run's rate over the baseline's at `v` on the axis: what each range end is judged by."""
    o, b = pair
    r = (
        (o.rate(v, at) / b.rate(v, at))
        if name == "concurrency"
        else (o.rate(1.0, v) / b.rate(1.0, v))
    )
    return float(r)


def _advantage_ci(
    name: str, v: float, fits: list[tuple[RateModel, RateModel]], at: float
) -> tuple[float, float] | None:
    """The advantage's interval over the bootstrap refits, so that ahead or behind excludes level."""
    if len(fits) <= 20:
        return None
    lo, hi = percentile_interval(np.asarray([_advantage(name, v, pair, at) for pair in fits[1:]]))
    return float(lo), float(hi)


def _measured_axis(
    name: str, fits: list[tuple[RateModel, RateModel]], low: float, high: float, at: float
) -> Axis:
    """The axis with what holds whatever the crossover: both ends' advantages and the loss's
    factors, the base each outcome adds its point or its reason to."""
    mo, mb = fits[0]
    a_lo, a_hi = _advantage(name, low, fits[0], at), _advantage(name, high, fits[0], at)
    adv_lo_ci, adv_hi_ci = _advantage_ci(name, low, fits, at), _advantage_ci(name, high, fits, at)
    lo_pt = (low, at) if name == "concurrency" else (1.0, low)
    hi_pt = (high, at) if name == "concurrency" else (1.0, high)
    # what the loss is made of, where there is a material one (a tenth of the advantage)
    factors = _factors(mo, mb, name, lo_pt, hi_pt) if a_hi < MATERIAL_LOSS * a_lo else []
    return Axis(
        name,
        low,
        high,
        advantage_low=a_lo,
        advantage_high=a_hi,
        factors=factors,
        advantage_low_ci=adv_lo_ci,
        advantage_high_ci=adv_hi_ci,
    )


def _slower_from_start(ax: Axis, rng_txt: str) -> Axis:
    """The axis when this run is not ahead at the range's start: no breakeven to find, so the
    reason says how it stands against the baseline at both ends."""
    words = {
        "behind": "slower than",
        "level": "not distinguishable from",
        "ahead": "faster than",
    }
    at_lo = f"{ax.advantage_low:.2f}x{_ci_text(ax.advantage_low_ci)} at {ax.low:.0f}"
    at_hi = f"{ax.advantage_high:.2f}x{_ci_text(ax.advantage_high_ci)} at {ax.high:.0f}"
    return replace(
        ax,
        reason=f"no {ax.name} crossover in {rng_txt}: not faster than the "
        f"baseline at the start, {words[ax.side('low')]} it ({at_lo}); "
        f"{words[ax.side('high')]} it at the end ({at_hi})",
    )


def _crossover_ci(
    crosses: list[float | None], low: float, high: float
) -> tuple[float | None, float | None] | None:
    """The crossover's interval over the refits, with an open (null) end where the resamples
    leave the searched range: a point beyond it is not a bound."""
    # a resample without a crossing in the searched range sits beyond it (or, slower from the
    # start, below it): an open end of the interval, printed as null
    top = high * EXTRAPOLATE
    boot = np.asarray([2 * top if c is None else max(c, low - 1) for c in crosses[1:]])
    ci = None
    if boot.size >= 20:
        lo_ci, hi_ci = percentile_interval(boot)
        ci = (None if lo_ci < low else lo_ci, None if hi_ci > top else hi_ci)
        if ci == (None, None):
            ci = None  # open at both ends: no interval to give
    return ci


def _axis(
    name: str,
    fits: list[tuple[RateModel, RateModel]],
    low: float,
    high: float,
    at: float,
    unit: str,
) -> Axis:
    log = name == "concurrency"
    crosses, _ = _solve_axis(name, fits, low, high, at, log)
    point_x = crosses[0]
    ax = _measured_axis(name, fits, low, high, at)
    rng_txt = f"[{low:.0f}, {high:.0f}]{unit}"
    if point_x == float("-inf"):
        return _slower_from_start(ax, rng_txt)
    ci = _crossover_ci(crosses, low, high)
    if point_x is not None and point_x <= high:
        return replace(ax, point=point_x, ci=ci)
    extra = point_x
    a_hi = ax.advantage_high
    reason = f"no {name} crossover in {rng_txt}: this run stays faster ({a_hi:.2f}x at {high:.0f})"
    if extra is not None:
        reason += f"; the fitted model extrapolates one near {extra:.0f}{unit} (unmeasured)"
    return replace(ax, ci=ci if extra is not None else None, extrapolated=extra, reason=reason)


@dataclass(frozen=True)
class FewerDrafts:
    """The predicted per-request rate at high batch with fewer draft tokens per step.

    From the two fitted models and this run's commit lengths at that batch, under two stated
    assumptions: the step time this run spends above the baseline's (drafting plus verifying the
    drafts) scales with the number of drafts, and with K' drafts a step accepts min(a, K') of
    the a it accepted with all K (exact for a chain drafter; for a tree, K' bounds its depth)."""

    batch: float
    drafts: int  # K: this run's drafts per step (its longest commit - 1)
    best: int  # K' with the highest predicted rate (0: speculation off, K: as it is)
    rates: tuple[float, ...]  # predicted per-request tps for K' = 0..K
    gain: float  # the best's rate / this run's - 1
    gain_ci: tuple[float, float] | None = None  # over the bootstrap refits, for the same K'

    def with_interval(self, resampled: list[FewerDrafts]) -> FewerDrafts:
        """This prediction with the interval of its gain (at its K') over bootstrap refits."""
        g = np.asarray(
            [
                r.rates[self.best] / r.rates[r.drafts] - 1.0
                for r in resampled
                if r.drafts == self.drafts
            ]
        )
        if g.size < 20:
            return self
        lo, hi = percentile_interval(g)
        return FewerDrafts(
            self.batch, self.drafts, self.best, self.rates, self.gain, (float(lo), float(hi))
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "batch": self.batch,
            "drafts": self.drafts,
            "best_drafts": self.best,
            "predicted_tps": list(self.rates),
            "predicted_gain": self.gain,
            "predicted_gain_ci": None if self.gain_ci is None else list(self.gain_ci),
            "gain_vs_off": self.rates[self.best] / self.rates[0] - 1.0,
            "assumes": "the step time above the baseline's scales with the draft count; "
            "K' drafts accept min(accepted, K')",
        }


def fewer_drafts(
    rs: RunSteps,
    mo: RateModel,
    mb: RateModel,
    batch: float,
    at: float,
    idx: np.ndarray | None = None,
) -> FewerDrafts | None:
    """The draft count that maximises the per-request rate at `batch` (see FewerDrafts), from
    the steps `idx` (all by default); None with fewer than two drafts per step or too few uncut
    steps near that batch."""
    k = int(rs.commit.max()) - 1
    sel = np.arange(rs.n) if idx is None else idx
    near = sel[rs.full[sel] & (rs.batch[sel] >= 0.75 * batch)]
    if k < 2 or near.size < MIN_STEPS:
        return None
    accepted = rs.commit[near] - 1.0
    if accepted.mean() <= 0:
        return None
    s_o, s_b = float(mo.step_s(batch, at)), float(mb.step_s(batch, at))
    extra_commit = float(mo.commit_len(batch, at)) - 1.0
    rates = [float(mb.rate(batch, at))]
    for kk in range(1, k + 1):
        share = float(np.minimum(accepted, kk).mean() / accepted.mean())
        step = s_b + (s_o - s_b) * kk / k
        rates.append((1.0 + extra_commit * share) / max(step, 1e-9))
    rates[k] = float(mo.rate(batch, at))  # K drafts: this run's own fitted rate
    best = int(np.argmax(rates))
    return FewerDrafts(batch, k, best, tuple(rates), rates[best] / rates[k] - 1.0)


def _ci_text(ci: tuple[float, float] | None) -> str:
    return "" if ci is None else f" [{ci[0]:.2f}, {ci[1]:.2f}]"


def _pays(fewer: FewerDrafts | None) -> bool:
    """Fewer drafts are worth saying: a K' between off and all, with a material predicted gain
    whose interval excludes none."""
    return (
        fewer is not None
        and 0 < fewer.best < fewer.drafts
        and fewer.gain >= MATERIAL_GAIN
        and (fewer.gain_ci is None or fewer.gain_ci[0] > 0)
    )


def _fewer_text(f: FewerDrafts) -> str:
    vs_off = f.rates[f.best] / f.rates[0] - 1.0
    ci = "" if f.gain_ci is None else f" [{f.gain_ci[0]:+.0%}, {f.gain_ci[1]:+.0%}]"
    return (
        f"{f.best} draft tokens per step instead of {f.drafts} (a smaller tree) at batch "
        f"{f.batch:.0f} predicts {f.gain:+.0%}{ci} per request over this run and "
        f"{vs_off:+.0%} over the baseline (assuming the step's extra time scales with the "
        f"drafts). Where: {FLAGS_FEWER_DRAFTS}."
    )


def _switch_to(mb: RateModel | None, at: float) -> str:
    """What the policy switches to: against another speculative config it is "switch to it",
    not "switch off"."""
    return (
        "Speculation off"
        if mb is None or plain_decoding(None, float(mb.commit_len(1.0, at)))
        else ("The baseline's speculative configuration")
    )


def _loss_advice(conc: Axis, fewer: FewerDrafts | None) -> str:
    """What to change besides switching off, from what the loss above the crossover is made
    of: fewer drafts help against verify cost, not against falling acceptance."""
    step_f = next((f for f in conc.factors if f["name"] == "verify_cost_with_batch"), None)
    if _pays(fewer):
        return f"Better still: {_fewer_text(fewer)}"
    if step_f and (step_f["share_of_loss"] or 0) >= 0.5:
        return (
            "Most of the loss is verify cost growing with batch x verified tokens: verifying "
            f"fewer draft tokens (a smaller tree) at high batch moves the crossover up. "
            f"Where: {FLAGS_FEWER_DRAFTS}."
        )
    return (
        "Most of the loss is acceptance falling with batch (shared drafter "
        "capacity): fewer draft tokens will not recover it; switching off will."
    )


def _crossover_advice(
    conc: Axis, mo: RateModel, mb: RateModel, at: float, off: str, fewer: FewerDrafts | None
) -> tuple[list[str], float]:
    """The policy where the fitted curves cross inside the sweep: switch above the crossover
    only when this run is materially and significantly behind at the sweep's top."""
    parts: list[str] = []
    n = max(1, int(np.floor(conc.point)))
    gain = float(mb.rate(conc.high, at) / mo.rate(conc.high, at) - 1.0)
    if conc.side("high") == "behind":
        parts.append(
            f"{off} above batch {n} (crossover {conc.point:.1f}): per-request decode "
            f"+{gain:.0%} at concurrency {conc.high:.0f}, keeping the "
            f"{conc.advantage_low:.2f}x at {conc.low:.0f}. Where: {FLAGS_BATCH_OFF}."
        )
    else:
        at_hi = f"{conc.advantage_high:.2f}x{_ci_text(conc.advantage_high_ci)} at {conc.high:.0f}"
        parts.append(
            f"The fitted crossover is at batch {conc.point:.1f}, but at the top of the sweep "
            f"this run is not materially and significantly slower ({at_hi}): measure higher "
            f"concurrency before switching speculation off above batch {n} (predicted "
            f"+{gain:.0%} at {conc.high:.0f}). Where: {FLAGS_BATCH_OFF}."
        )
    parts.append(_loss_advice(conc, fewer))
    return parts, gain


def _slower_at_low_load(conc: Axis, at_lo: str, at_hi: str) -> tuple[str, float]:
    """The policy when this run is behind at the sweep's start: off there, and under load
    according to how it stands at the top."""
    gain = float(1 / conc.advantage_low - 1)
    hi_side = conc.side("high")
    if hi_side == "ahead":
        return (
            f"Speculation is slower than the baseline at low load ({at_lo}) "
            f"and faster under load ({at_hi}): off at low load (+{gain:.0%} per "
            f"request at {conc.low:.0f}), on under load."
        ), gain
    if hi_side == "behind":
        return (
            f"Speculation is slower than the baseline at every measured "
            f"concurrency ({at_lo}, {at_hi}): turn it off (+{gain:.0%} per "
            f"request at {conc.low:.0f})."
        ), gain
    return (
        f"Speculation is slower than the baseline at low load ({at_lo}) and "
        f"level with it under load ({at_hi}): turn it off (+{gain:.0%} per "
        f"request at {conc.low:.0f})."
    ), gain


def _no_crossover_advice(conc: Axis, fewer: FewerDrafts | None) -> tuple[list[str], float | None]:
    """The policy without a crossover in the sweep: from how this run stands at its start (and
    top), with a change supported only by a material, significant difference."""
    parts: list[str] = []
    gain = None
    at_lo = f"{conc.advantage_low:.2f}x{_ci_text(conc.advantage_low_ci)} at {conc.low:.0f}"
    at_hi = f"{conc.advantage_high:.2f}x{_ci_text(conc.advantage_high_ci)} at {conc.high:.0f}"
    lo_side = conc.side("low")
    if lo_side == "behind":
        text, gain = _slower_at_low_load(conc, at_lo, at_hi)
        parts.append(text)
    elif lo_side == "level":
        parts.append(
            f"No material, significant difference from the baseline at concurrency "
            f"{conc.low:.0f} ({at_lo}; {at_hi}): this data supports no policy change; "
            "measure with more repeats (--repeat) on a quieter machine."
        )
    else:
        tail = (
            f"; the model puts a crossover near {conc.extrapolated:.0f}: measure there "
            "before relying on it"
            if conc.extrapolated is not None
            else ""
        )
        parts.append(
            f"Keep speculation on over concurrency [{conc.low:.0f}, {conc.high:.0f}] "
            f"({conc.advantage_high:.2f}x at {conc.high:.0f}){tail}."
        )
        if _pays(fewer):
            parts.append(f"At high batch: {_fewer_text(fewer)}")
    return parts, gain


def _recommend(
    conc: Axis,
    ctx: Axis,
    mo: RateModel | None,
    mb: RateModel | None,
    at: float,
    fewer: FewerDrafts | None = None,
) -> tuple[str, float | None]:
    parts: list[str] = []
    gain = None
    off = _switch_to(mb, at)
    if conc.point is not None and mo is not None and mb is not None:
        parts, gain = _crossover_advice(conc, mo, mb, at, off, fewer)
    elif conc.reason and conc.point is None and conc.advantage_low is not None:
        parts, gain = _no_crossover_advice(conc, fewer)
    if ctx.point is not None:
        parts.append(f"{off} above context {ctx.point:.0f} tokens. Where: {FLAGS_CONTEXT_OFF}.")
    return " ".join(parts) or NO_POLICY, gain


def _curves(
    fits: list[tuple[RateModel, RateModel]],
    low: float,
    high: float,
    at: float,
    measured: dict[str, dict[int, list[float]]],
) -> dict[str, Any]:
    """Plot-ready per-request tps vs concurrency: both fitted curves with 95% bands and the
    measured per-request rates at each sweep point."""
    x = np.geomspace(low, high * EXTRAPOLATE, 40)
    out: dict[str, Any] = {"concurrency": x.tolist()}
    for j, label in ((0, "observed"), (1, "baseline")):
        rates = np.asarray([pair[j].rate(x, at) for pair in fits])
        out[f"{label}_tps"] = rates[0].tolist()
        if rates.shape[0] > 20:
            q = np.nanquantile(rates[1:], [(1 - CI_LEVEL) / 2, (1 + CI_LEVEL) / 2], axis=0)
            out[f"{label}_tps_low"], out[f"{label}_tps_high"] = q[0].tolist(), q[1].tolist()
        pts = measured[label]
        out[f"{label}_points"] = {
            "concurrency": sorted(pts),
            "decode_tps_per_request": [float(np.mean(pts[c])) for c in sorted(pts)],
        }
    return out


def _measured_points(m: Measured) -> dict[int, list[float]]:
    pts: dict[int, list[float]] = {}
    for r in m.ok:
        if tags.split(r.spec.tag)[0] == tags.CONCURRENCY_SWEEP and (w := r.decode_window()):
            pts.setdefault(concurrency_of(r), []).append(w[0] / w[1])
    return pts


def _refits(
    ro: RunSteps, rb: RunSteps, first: tuple[RateModel, RateModel], seed: int, resamples: int
) -> tuple[list[tuple[RateModel, RateModel]], list[np.ndarray]]:
    """Both models refitted on bootstrap resamples (the fitted pair first), with each refit's
    steps of this run, so that fewer_drafts can be redone on the same draws."""
    rng = np.random.default_rng(seed)
    fits = [first]
    picks: list[np.ndarray] = []  # each refit's steps of this run (for the fewer-drafts interval)
    for _ in range(resamples):
        idx = _resample(ro, rng)
        fo, fb = fit_rate_model(ro, idx), fit_rate_model(rb, _resample(rb, rng))
        if fo is not None and fb is not None:
            fits.append((fo, fb))
            picks.append(idx)
    return fits, picks


def _context_axis(ro: RunSteps, rb: RunSteps, fits: list[tuple[RateModel, RateModel]]) -> Axis:
    """The context axis over the batch-1 contexts both runs measured, or why it has none."""
    one_o, one_b = ro.context[ro.batch == 1], rb.context[rb.batch == 1]
    if one_o.size and one_b.size:
        c_lo = float(max(one_o.min(), one_b.min()))
        c_hi = float(min(one_o.max(), one_b.max()))
    else:
        c_lo = c_hi = 0.0
    # within one generation context and output position move together (ARCHITECTURE §1): a
    # context crossover needs prompts of different lengths in both runs
    spread = min(np.ptp(r.prompt[r.batch == 1]) if (r.batch == 1).any() else 0.0 for r in (ro, rb))
    if c_hi - c_lo >= MIN_CONTEXT_SPREAD and spread >= MIN_CONTEXT_SPREAD:
        return _axis("context", fits, c_lo, c_hi, 0.0, " tokens")
    return Axis(
        "context",
        c_lo,
        c_hi,
        reason="no context crossover: needs a context sweep "
        f"(prompt lengths {MIN_CONTEXT_SPREAD}+ tokens apart) in both runs",
    )


def breakeven(
    m: Measured, mb: Measured, *, seed: int = 0, resamples: int = DEFAULT_RESAMPLES
) -> Breakeven | None:
    """This run (m) against the baseline (mb); None when either has too few reliable steps."""
    ro, rb = run_steps(m), run_steps(mb)
    if ro is None or rb is None:
        return None
    fit_o, fit_b = fit_rate_model(ro), fit_rate_model(rb)
    if fit_o is None or fit_b is None:
        return None
    fits, picks = _refits(ro, rb, (fit_o, fit_b), seed, resamples)
    sweep = [c for c in ro.levels if c in rb.levels]
    conc_at = (
        float(np.median(ro.context[ro.batch > 1]))
        if (ro.batch > 1).any()
        else float(np.median(ro.context))
    )
    if len(sweep) >= 2:
        conc = _axis("concurrency", fits, float(min(sweep)), float(max(sweep)), conc_at, "")
    else:
        conc = Axis(
            "concurrency",
            1.0,
            float(max(sweep or [1])),
            reason="no concurrency crossover: needs a concurrency sweep (e.g. "
            "--concurrency 1,4,16) in both runs",
        )
    ctx = _context_axis(ro, rb, fits)
    fewer = fewer_drafts(ro, fit_o, fit_b, conc.high, conc_at) if len(sweep) >= 2 else None
    if fewer is not None:
        redone = (
            fewer_drafts(ro, fo, fb, conc.high, conc_at, idx)
            for (fo, fb), idx in zip(fits[1:], picks, strict=True)
        )
        fewer = fewer.with_interval([r for r in redone if r is not None])
    rec, gain = _recommend(conc, ctx, fit_o, fit_b, conc_at, fewer)
    curves = _curves(
        fits,
        conc.low,
        max(conc.high, conc.low + 1),
        conc_at,
        {"observed": _measured_points(m), "baseline": _measured_points(mb)},
    )
    curves.update(crossover=conc.point, context=conc_at)
    return Breakeven(conc, ctx, rec, curves, predicted_gain=gain, fewer_drafts=fewer)
