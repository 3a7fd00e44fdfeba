"""What the findings test, derived from a measured run: each a small function returning a frozen
dataclass (step-time model and drift, acceptance shape, two-point window, concurrency, the
baseline split), gathered once into `Facts`, the one object every rule reads (findings.py sits
above this module). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specscope.analysis.client_health import ClientHealth
from specscope.analysis.diagnosis.cards import BY_ID
from specscope.analysis.fits import acceptance as acc
from specscope.analysis.fits import steptime as stm
from specscope.analysis.headline import decompose as dec
from specscope.analysis.headline.measure import Measured, StepTable, concurrency_of, prompt_len
from specscope.analysis.result import Attribution, Interval
from specscope.analysis.steps.speculation import SpeculationState
from specscope.trace import tags
from specscope.trace.model import RequestTrace, Run

HONEYMOON_DEFAULT_WINDOW = 200  # the story's two-point window (~200 tokens) when none was run
EARLY_START = 128  # "the first tokens": acceptance before any decay, for the decay's cost


@dataclass(frozen=True)
class TwoPoint:
    """The story's two-point estimate: (N2 - N1) / (T2 - T1) over its repeats."""

    n1: int
    n2: int
    prompt_tokens: int | None
    decode_tps: float
    repeats: int
    spread: float  # relative spread of the per-repeat estimates (max-min)/median, 0 when 1
    rates: tuple[float, ...] = ()  # the per-repeat estimates (N2 - N1) / (T2 - T1)


@dataclass(frozen=True)
class MainSpan:
    """Where the main requests' reliable steps sit."""

    context: tuple[float, float] | None = None
    output_span: float = 0.0
    prompt: float | None = None


def main_span(mt: StepTable | None) -> MainSpan:
    if mt is None or not mt.n:
        return MainSpan()
    return MainSpan(
        context=(float(mt.context.min()), float(mt.context.max())),
        output_span=float(mt.pos.max() - mt.pos.min()),
        prompt=float(np.median(mt.context - mt.pos)),
    )


@dataclass(frozen=True)
class StepTimeFacts:
    """The step-time model over every reliable step and what it says about the main requests."""

    fit: stm.StepTimeFit | None = None
    drift: stm.DriftTest | None = None
    drift_cost: float | None = None  # mean step / mean step without the drift term
    context_share: float | None = None  # context term / expected step at the main context
    growth_along_generation: float | None = None  # confounded case: end/start step time - 1
    model: dict[str, Any] | None = None  # Analysis.step_time_model
    profile: dict[str, Any] | None = None  # series step_time_by_position


def _stall_free_mean(fit: stm.StepTimeFit, mt: StepTable) -> float:
    """The main requests' mean step without the stalls the fit left out: the drift is a share of
    the step the server takes, not of its faults."""
    if fit.stall_above_s is None:
        return float(mt.step_s.mean())
    pred = fit.expected(mt.context, mt.commit) + (fit.per_output_token or 0.0) * mt.pos
    ok = np.abs(mt.step_s - pred) <= fit.stall_above_s
    return float(mt.step_s[ok].mean() if ok.any() else mt.step_s.mean())


def step_time_facts(table: StepTable | None, mt: StepTable | None, span: MainSpan) -> StepTimeFacts:
    if table is None or not table.n:
        return StepTimeFacts()
    fit = stm.fit_step_time(
        table.step_s, table.context, table.pos, commit_len=table.commit, request_ids=table.rid
    )
    if fit is None:
        return StepTimeFacts()
    model = fit.to_dict()
    if mt is None or not mt.n:
        return StepTimeFacts(fit=fit, model=model)
    drift = stm.drift_test(fit, span_tokens=span.output_span, mean_step_s=_stall_free_mean(fit, mt))
    drift_cost = context_share = growth = None
    if fit.per_output_token is not None:
        no_drift = mt.step_s - fit.per_output_token * mt.pos
        if no_drift.mean() > 0 and drift is not None and drift.present:
            drift_cost = float(mt.step_s.mean() / no_drift.mean())
        expected = fit.expected(mt.context, mt.commit)
        ctx_part = fit.per_context_token * float(mt.context.mean())
        context_share = ctx_part / float(expected.mean()) if expected.mean() > 0 else None
        model["context_effect_s"] = fit.per_context_token * float(np.ptp(mt.context))
        model["output_effect_s"] = fit.per_output_token * span.output_span
        model["excess_step_s_mean"] = float((mt.step_s - expected).mean())
    else:
        # confounded: the growth along the generation, start vs end, by the fitted slope
        lo, hi = span.context or (0, 0)
        growth = stm.context_effect(fit, lo, hi)
        expected = fit.expected(mt.context, mt.commit)
    xs, ys = stm.binned_profile(mt.pos, mt.step_s)
    _, es = stm.binned_profile(mt.pos, expected)
    profile = {"output_pos": xs.tolist(), "step_s": ys.tolist(), "expected_step_s": es.tolist()}
    return StepTimeFacts(fit, drift, drift_cost, context_share, growth, model, profile)


# The experiment that tells a host-side step-time drift from a device-side one: a fresh request
# whose prompt is as long as the context the long generation reached (the quick plan's last
# context-sweep point). Device-bound cost (the sequence's KV, attention) comes with the context
# and reappears in it; host work that grows with the output generated (a whole-output
# detokenizer, a stop-string scan) starts from nothing again.
# Its base: a fresh request whose prompt is as long as the generation's own (the sweep point at
# the main prompt), run beside the long one. The generation's first steps ran minutes earlier,
# and on a shared machine its load then is not the load now (a fresh clone's suite once left a
# host-side drift undecided that way); two fresh requests a few seconds apart share it.
# Where several fresh requests ran at the reached context, the one that stepped fastest decides:
# device-bound cost reappears in every one of them, so one that steps near the base shows the
# growth does not come with the context, and load only adds time (a recorded CPU run had a burst
# slow one of two such requests 2x, where the median of their pooled steps can fall anywhere
# between the two: the likeliest reading of a CI run that left a host-side drift undecided).
FRESH_PROMPT_SHARE = 0.85  # a fresh prompt "as long as" the context reached: this share of it
BASE_PROMPT_RANGE = (0.8, 1.25)  # a fresh prompt "as long as" the generation's: this range of it
EDGE_TOKENS = 64  # the first / last output tokens compared, and the fresh request's first ones
MIN_EDGE_STEPS = 8


@dataclass(frozen=True)
class DriftSeparation:
    """Median step times of the long generation's first and last steps and of the first steps
    of fresh requests started at the context it reached; `base_s`, where measured, those of
    fresh requests started at the generation's own prompt length, beside them."""

    early_s: float
    late_s: float
    fresh_s: float  # the fastest fresh request's median (the comment above FRESH_PROMPT_SHARE)
    reached_context: int
    fresh_prompt: int  # the shortest fresh prompt used
    fresh_requests: int
    base_s: float | None = None
    base_prompt: int | None = None

    @property
    def share(self) -> float | None:
        """How much of the generation's growth the fresh request shows: ~1 device-bound, ~0
        host work per output token; None when the generation did not grow. Against the paired
        base where there is one (the context's cost measured at one moment of the machine's
        load), else against the generation's first steps."""
        grew = self.late_s - self.early_s
        start = self.base_s if self.base_s is not None else self.early_s
        return (self.fresh_s - start) / grew if grew > 0 else None


def _fresh_steps(table: StepTable, main_ids: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Rows of the first EDGE_TOKENS steps of requests outside the main ones whose prompt lies
    in [lo, hi]."""
    prompt = table.context - table.pos
    return (
        ~np.isin(table.rid, main_ids) & (prompt >= lo) & (prompt <= hi) & (table.pos < EDGE_TOKENS)
    )


def _request_medians(table: StepTable, rows: np.ndarray) -> dict[int, float]:
    """Each request's median step over `rows`, for the requests with enough steps there."""
    out = {}
    for rid in np.unique(table.rid[rows]):
        steps = table.step_s[rows & (table.rid == rid)]
        if steps.size >= MIN_EDGE_STEPS:
            out[int(rid)] = float(np.median(steps))
    return out


def drift_separation(table: StepTable | None, mt: StepTable | None) -> DriftSeparation | None:
    """The fresh requests at the reached context against the main requests' two ends (None
    without enough steps on each side: the experiment was not run or did not fit)."""
    if table is None or mt is None or not mt.n:
        return None
    reached = float(mt.context.max())
    early = mt.step_s[mt.pos < mt.pos.min() + EDGE_TOKENS]
    late = mt.step_s[mt.context > reached - EDGE_TOKENS]
    main_ids = np.unique(mt.rid)
    fresh_rows = _fresh_steps(table, main_ids, FRESH_PROMPT_SHARE * reached, np.inf)
    fresh = _request_medians(table, fresh_rows)
    if min(early.size, late.size) < MIN_EDGE_STEPS or not fresh:
        return None
    main_prompt = float(np.median(mt.context - mt.pos))
    lo, hi = (share * main_prompt for share in BASE_PROMPT_RANGE)
    base_rows = _fresh_steps(table, main_ids, lo, min(hi, FRESH_PROMPT_SHARE * reached - 1))
    paired = int(base_rows.sum()) >= MIN_EDGE_STEPS
    prompt = table.context - table.pos
    return DriftSeparation(
        early_s=float(np.median(early)),
        late_s=float(np.median(late)),
        fresh_s=min(fresh.values()),
        reached_context=int(reached),
        fresh_prompt=int(prompt[fresh_rows].min()),
        fresh_requests=len(fresh),
        base_s=float(np.median(table.step_s[base_rows])) if paired else None,
        base_prompt=int(np.median(prompt[base_rows])) if paired else None,
    )


@dataclass(frozen=True)
class AcceptanceShape:
    """The decay / window model search and what each effect costs the main requests."""

    fit: acc.AcceptanceFit | None = None
    source: str = ""
    window_cost: float | None = None
    decay_cost: float | None = None
    notes: tuple[str, ...] = ()
    table: StepTable | None = None  # the steps the search ran on (the findings' tests use them)


def acceptance_shape(table: StepTable, mt: StepTable | None, *, source: str) -> AcceptanceShape:
    """Decay / window model search over `table` (every request), costs over `mt` (main)."""
    # the last step of a request cut by max_tokens commits only the tokens left: it says
    # nothing about the drafter, so the acceptance fit leaves it out
    keep = np.ones(table.n, dtype=bool)
    last_of = {int(r): i for i, r in enumerate(table.rid)}
    keep[list(last_of.values())] = False
    a_fit = acc.fit_acceptance(table.commit[keep], table.context[keep], table.pos[keep])
    if a_fit is None or mt is None or not mt.n:
        return AcceptanceShape(fit=a_fit, source=source, table=table)
    L_main = float(mt.commit.mean())
    window_cost = decay_cost = None
    if a_fit.window_present and a_fit.window is not None and L_main > 0:
        w = a_fit.window
        lifted = mt.commit - w.coef * (mt.context >= (w.at or 0))
        window_cost = float(lifted.mean() / L_main)
    if a_fit.decay_present and a_fit.decay is not None and L_main > 0:
        # what the main requests would commit without decay: the acceptance of the first
        # tokens (pooled over every request, below any window), over the main mean with the
        # window cliff already lifted (so decay x window = the total shape cost)
        early = keep & (table.pos < EARLY_START)
        if a_fit.window_present and a_fit.window is not None:
            early &= table.context < (a_fit.window.at or 0)
        start = a_fit.decay.before
        if early.sum() >= 20:
            # extrapolated to position 0: the decay has already begun in the first tokens
            x = np.column_stack([np.ones(int(early.sum())), table.pos[early]])
            beta, *_ = np.linalg.lstsq(x, table.commit[early], rcond=None)
            start = float(max(beta[0], table.commit[early].mean()))
        decay_cost = start / (L_main * (window_cost or 1.0))
    return AcceptanceShape(a_fit, source, window_cost, decay_cost, tuple(a_fit.notes), table)


def two_point(ok: tuple[RequestTrace, ...]) -> tuple[TwoPoint | None, list[RequestTrace]]:
    """The two-point estimate (N2 - N1) / (T2 - T1) over its repeats, and its N2 requests."""
    n1 = [r for r in ok if r.spec.tag == tags.make(tags.TWO_POINT, "n1") and r.e2e_s]
    n2 = [r for r in ok if r.spec.tag == tags.make(tags.TWO_POINT, "n2") and r.e2e_s]
    if not n1 or not n2:
        return None, n2

    def toks(r: RequestTrace) -> int:
        return r.completion_tokens if r.completion_tokens is not None else r.tokens_received

    # means, not medians: a stall in one repeat is part of the throughput the full generation
    # also pays, and a median would hide it from the two-point side only
    t1, t2 = float(np.mean([r.e2e_s for r in n1])), float(np.mean([r.e2e_s for r in n2]))
    k1, k2 = float(np.mean([toks(r) for r in n1])), float(np.mean([toks(r) for r in n2]))
    if not t1 or not t2 or t2 <= t1 or k2 <= k1:
        return None, n2
    per = [
        (toks(b) - toks(a)) / (b.e2e_s - a.e2e_s)
        for a, b in zip(n1, n2, strict=False)
        if b.e2e_s > a.e2e_s and toks(b) > toks(a)
    ]
    med = float(np.median(per)) if per else 0.0
    spread = float((max(per) - min(per)) / med) if len(per) > 1 and med > 0 else 0.0
    return (
        TwoPoint(
            n1=round(k1),
            n2=round(k2),
            prompt_tokens=prompt_len(n2[0]) or None,
            decode_tps=(k2 - k1) / (t2 - t1),
            repeats=min(len(n1), len(n2)),
            spread=spread,
            rates=tuple(per),
        ),
        n2,
    )


@dataclass(frozen=True)
class TwoPointFacts:
    estimate: TwoPoint | None = None
    window_step_s: float | None = None  # mean step time inside the two-point window
    context_factor: float | None = None  # expected step full / two-point (context only)
    honeymoon: acc.Honeymoon | None = None
    window: StepTable | None = None  # the N2 requests' steps past N1


def two_point_facts(
    m: Measured, fit: stm.StepTimeFit | None, mt: StepTable | None
) -> TwoPointFacts:
    tp, n2 = two_point(m.ok)
    window_step_s = context_factor = None
    window = None
    if tp is not None:
        win = [s for s in m.reliable_steps(n2) if s.output_pos >= tp.n1]
        if win:
            window_step_s = float(np.mean([s.step_s for s in win]))
            window = StepTable.of(win)
    if tp is not None and fit is not None and mt is not None and mt.n:
        # the two-point may sit at another context than the full generation: what the context
        # term alone predicts for the ratio of their step times (not a bias; allowed for)
        tp_ctx = (tp.prompt_tokens or 0) + (tp.n1 + tp.n2) / 2
        s_tp = fit.s0 + fit.per_context_token * tp_ctx
        s_full = fit.s0 + fit.per_context_token * float(mt.context.mean())
        if s_tp > 0 and s_full > 0:
            context_factor = s_full / s_tp
    honeymoon = None
    if mt is not None and mt.n:
        start, width = (tp.n1, tp.n2 - tp.n1) if tp else (0, HONEYMOON_DEFAULT_WINDOW)
        honeymoon = acc.honeymoon(mt.commit, mt.step_s, mt.pos, window_tokens=width, start=start)
    return TwoPointFacts(tp, window_step_s, context_factor, honeymoon, window)


def sweep_requests(m: Measured) -> dict[int, list[RequestTrace]]:
    """The concurrency sweep's successful requests by level, levels ascending."""
    conc: dict[int, list[RequestTrace]] = {}
    for r in m.ok:
        if tags.split(r.spec.tag)[0] == tags.CONCURRENCY_SWEEP:
            conc.setdefault(concurrency_of(r), []).append(r)
    return dict(sorted(conc.items()))


def _ci_interval(point: float | None, ci: tuple[float, float] | None) -> Interval | None:
    if point is None:
        return None
    return Interval(value=point, low=ci[0] if ci else None, high=ci[1] if ci else None)


@dataclass(frozen=True)
class BaselineFacts:
    """The observed run against a baseline run: the exact split and its intervals."""

    decomposition: dec.Decomposition
    speculation: SpeculationState
    split: dec.Split | None
    split_ci: dec.SplitCI | None
    attribution: Attribution
    series: dict[str, Any]


def baseline_facts(baseline: Run, mb: Measured, m: Measured, seed: int = 0) -> BaselineFacts | None:
    """None when either run has no usable decode window."""
    h, hb = m.decomposition, mb.decomposition
    if hb is None or h is None:
        return None
    sp = dec.split(hb, h)
    ci = None
    # a bootstrap over one unit is a point, not an interval: CIs need >= 2 units a side
    if mb.rows is not None and m.rows is not None and len(mb.rows) >= 2 and len(m.rows) >= 2:
        ci = dec.split_ci(mb.rows, m.rows, unit=m.unit, seed=seed)
    attribution = Attribution(
        tps_ratio=sp.tps_ratio if sp else None,
        acceptance_factor=sp.acceptance_factor if sp else None,
        step_time_factor=sp.step_time_factor if sp else None,
        tps_ratio_ci=_ci_interval(sp.tps_ratio, ci.tps_ratio) if sp and ci else None,
        acceptance_factor_ci=_ci_interval(sp.acceptance_factor, ci.acceptance_factor)
        if sp and ci
        else None,
        step_time_factor_ci=_ci_interval(sp.step_time_factor, ci.step_time_factor)
        if sp and ci
        else None,
        baseline_run=baseline.info.run_id or None,
    )
    series = {
        "label": ["baseline", "observed"],
        "decode_tps": [hb.decode_tps, h.decode_tps],
        "mean_commit_len": [hb.mean_commit_len, h.mean_commit_len],
        "mean_step_s": [hb.mean_step_s, h.mean_step_s],
    }
    return BaselineFacts(hb, mb.speculation, sp, ci, attribution, series)


@dataclass(frozen=True)
class Concurrency:
    """The concurrency sweep: (concurrency, median per-request tps, its spread) per point and the
    per-request tps samples the batching test runs on."""

    points: tuple[tuple[int, float, float | None], ...] = ()
    samples: dict[int, list[float]] = field(default_factory=dict)
    commit: dict[int, float] = field(default_factory=dict)  # tokens per reliable step, by level


def concurrency(m: Measured) -> Concurrency:
    """Per sweep level: the per-request decode tps (the batching test's samples), the point
    (level, mean tps, mean reliable step time) and the mean tokens committed per reliable step
    (what separates a batch that commits less a step, acceptance, from one whose steps cost
    more: causes._batching). A level without a decode window is left out."""
    points, samples, commit = [], {}, {}
    for c, rs in sweep_requests(m).items():
        tps = [w[0] / w[1] for w in (r.decode_window() for r in rs) if w]
        if not tps:
            continue
        steps = m.reliable_steps(rs)
        st = [s.step_s for s in steps]
        points.append((c, float(np.mean(tps)), float(np.mean(st)) if st else None))
        samples[c] = tps
        if steps:
            commit[c] = float(np.mean([s.commit_len for s in steps]))
    return Concurrency(tuple(points), samples, commit)


# Under this many tokens per drafted verify step, drafts are "almost never accepted".
NEVER_ACCEPTED = BY_ID["speculation_overhead"].thresholds["never accepted: tokens per drafted step"]


@dataclass(frozen=True)
class Facts:
    """Everything the rules read, built once by `diagnosis.analyze`: the measured run and its
    groups of derived facts (no field copied out of them)."""

    measured: Measured
    speculation: SpeculationState
    span: MainSpan
    step_time: StepTimeFacts
    shape: AcceptanceShape
    two_point: TwoPointFacts
    concurrency: Concurrency
    baseline: BaselineFacts | None = None
    step_table: StepTable | None = None  # the steps of the step-time fit (concurrency 1)
    main_table: StepTable | None = None  # reliable steps of the main requests
    e2e_s: float | None = None  # median end-to-end time of the main requests
    drift_separation: DriftSeparation | None = None  # fresh requests at the reached context
    timed_main_table: StepTable | None = None  # the main requests' steps in the step-time fit
    client: ClientHealth | None = None  # whether the client kept up (None: not sampled)

    @property
    def flavor(self) -> str:
        """RunInfo.flavor: picks the server's own flag names in `next` advice."""
        return self.measured.run.info.flavor

    @property
    def never_accepted(self) -> float | None:
        """Tokens per verify step when speculation is on and its drafts are almost never
        accepted (under NEVER_ACCEPTED), else None. Per drafted step where the server says
        which steps drafted (a step that drafted nothing commits one token by design), else
        over all steps. One predicate for the finding (certain without a baseline) and for its
        cause (the drafter's guessing ruled out)."""
        h = self.measured.headline
        if h is None or self.speculation.on is not True:
            return None
        per = h.mean_commit_len_per_drafted_step
        per = per if per is not None else h.mean_commit_len
        return per if per is not None and per < NEVER_ACCEPTED else None
