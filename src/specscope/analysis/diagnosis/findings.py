"""From measured facts to ranked findings (ARCHITECTURE §6), each decided by a statistical test.

One function per finding id, in `RULES`, each with its thresholds beside it. A rule turns the
facts into a `Claim`: the finding as it would read, and the `Test` that decides it (its method,
effect size with a 95% interval, one-sided p-value, and the smallest effect that matters;
analysis/fits/significance.py). `decide` controls the false-discovery rate over the ids that were
tested (Benjamini-Hochberg at ALPHA) and reports a finding only when it is significant after that
control AND its estimate reaches the stated minimum; every claim that was tested but not reported
is stated as such ("no two_point_bias: +12% (95% CI -20%..+55%), the interval includes zero
effect"). `confidence` is the probability that the claim is real and material (significance.
confidence), checked for calibration against the twin's truth by bench/false_findings.py.

`factor` is the finding's multiplicative share of the baseline gap (when a baseline exists): the
acceptance family splits `acceptance_factor`, the step-time family splits `step_time_factor`, so
the factors of one family multiply back to the attribution exactly. Without a baseline, each
finding's cost to the observed run (how much faster it would be without the effect) is given as
evidence instead, and ranking uses it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from specscope.analysis.diagnosis import advice, causes
from specscope.analysis.diagnosis.cards import BY_ID
from specscope.analysis.diagnosis.facts import Facts, TwoPoint
from specscope.analysis.fits import significance as sig
from specscope.analysis.fits.acceptance import (
    COARSE_CUTS,
    EARLY_POS,
    AcceptanceFit,
)
from specscope.analysis.fits.steptime import DRIFT_MIN_SHARE, HUBER_K, KTOK, DriftTest, StepTimeFit
from specscope.analysis.headline.decompose import Decomposition, Split, SplitCI
from specscope.analysis.headline.measure import all_delivered_whole
from specscope.analysis.result import Evidence, Finding, FindingTest
from specscope.analysis.steps.speculation import plain_decoding, stated_draft_window

if TYPE_CHECKING:  # the step columns diagnosis.py builds (imported for types only: no cycle)
    from specscope.analysis.headline.measure import StepTable


def _ev(label: str, value: float | int | str | None, unit: str = "", source: str = "") -> Evidence:
    if isinstance(value, (float, np.floating)):
        value = float(value)
        value = (
            round(value, 6 - math.floor(math.log10(abs(value))) if value else 6)
            if math.isfinite(value)
            else None
        )
    elif isinstance(value, np.integer):
        value = int(value)
    return Evidence(label=label, value=value, unit=unit, source=source)


# The evidence label of a finding's cost to the run (the verdict and the reports read it by it).
COST_LABEL = "throughput cost of this effect (x faster without it)"


def _cost_ev(cost: float | None, source: str) -> list[Evidence]:
    if cost is None:
        return []
    return [_ev(COST_LABEL, cost, "x", source)]


def _split(f: Facts) -> Split | None:
    """The exact acceptance x step-time split against the baseline (None without one)."""
    return f.baseline.split if f.baseline is not None else None


def _split_ci(f: Facts) -> SplitCI | None:
    return f.baseline.split_ci if f.baseline is not None else None


def _family_factors(f: Facts) -> dict[str, float | None]:
    """Per-finding shares of the baseline gap; each family multiplies to its attribution factor."""
    out: dict[str, float | None] = {}
    split = _split(f)
    if split is None:
        return out
    decay = f.shape.decay_cost or 1.0
    window = f.shape.window_cost or 1.0
    out["acceptance_decay"] = decay
    out["draft_window"] = window
    out["acceptance_low"] = split.acceptance_factor / (decay * window)
    drift = f.step_time.drift_cost or 1.0
    out["step_time_drift"] = drift
    # against plain decoding the step-time gap is the cost of speculating, not of context
    out["context_scaling"] = None if _plain_baseline(f) else split.step_time_factor / drift
    out["speculation_overhead"] = split.tps_ratio
    return out


@dataclass
class Claim:
    """A finding as it would read, and the test that decides whether it is reported."""

    id: str
    summary: str
    evidence: list[Evidence]
    next: str
    # None: a validity check decided by counting (not a sampled effect), always reported
    test: sig.Test | None
    factor: float | None = None
    # ceiling on confidence: a claim resting on an assumption the data cannot test (a
    # hypothesis whose `next` experiment tests it) is never stated as more than this
    cap: float = 0.99
    check_confidence: float = 0.9


def _plain_baseline(f: Facts) -> bool:
    """The baseline run is plain decoding (speculation.plain_decoding)."""
    if f.baseline is None:
        return False
    return plain_decoding(f.baseline.speculation, f.baseline.decomposition.mean_commit_len)


def _spec_on(f: Facts) -> bool:
    return f.speculation is not None and f.speculation.on is True


def _src_steps(f: Facts) -> str:
    return f"client steps, {f.measured.main_label}"


def _complete_steps(t: StepTable | None) -> StepTable | None:
    """The steps that no max_tokens cut can have touched: those starting at least one maximal
    commit before the request's end. Dropping only the cut step would bias the late steps low
    (a long commit is the likelier one to cross the end and be dropped); whether a step starts
    that early depends on the steps before it only, never on its own commit."""
    if t is None or not t.n:
        return t
    ends = {
        int(r): float(np.max(t.pos[t.rid == r] + t.commit[t.rid == r])) for r in np.unique(t.rid)
    }
    k = float(t.commit.max())
    keep = t.pos + k <= np.asarray([ends[int(r)] for r in t.rid])
    return type(t)(t.commit[keep], t.step_s[keep], t.context[keep], t.pos[keep], t.rid[keep])


CONTENT_POS = 64  # the output positions every request is compared over


def _content_var(f: Facts) -> float:
    """Between-prompt variance of log commit length in this run, over the same first
    CONTENT_POS output tokens of every request that generated that many (so a decay, the same
    in every request, is not read as content), the fitted window cliff divided out; 0 when not
    estimable."""
    t = _complete_steps(f.shape.table)
    if t is None or not t.n:
        return 0.0
    fitted = np.full(t.n, float(t.commit.mean()))
    a = f.shape.fit
    if a is not None and a.window is not None and a.window.at is not None:
        col = (t.context > a.window.at).astype(float)
        fitted = fitted + a.window.coef * (col - col.mean())
    ends = {
        int(r): float(np.max(t.pos[t.rid == r] + t.commit[t.rid == r])) for r in np.unique(t.rid)
    }
    long_enough = np.asarray([ends[int(r)] >= CONTENT_POS for r in t.rid])
    sel = long_enough & (t.pos < CONTENT_POS - float(t.commit.max()))
    return sig.content_variance(t.commit[sel], t.rid[sel], fitted=fitted[sel], min_steps=4)


def _with_content(lr: tuple[float, float], sides: int, f: Facts) -> tuple[float, float]:
    """(log estimate, se) widened by the content variance of `sides` single generations: a
    bootstrap over one generation's steps cannot see that another prompt commits differently."""
    return lr[0], math.sqrt(lr[1] ** 2 + sides * _content_var(f))


def _commit_below(f: Facts, threshold: float, what: str) -> sig.Test:
    """Is the main requests' mean commit length below `threshold`? log(threshold / L) > 0,
    cluster-robust over 64-step blocks of the main requests' steps."""
    L = f.measured.decomposition.mean_commit_len if f.measured.decomposition else None
    mt = f.main_table
    method = (
        f"one-sided z test of mean commit length < {threshold} ({what}), "
        "cluster-robust over 64-step blocks"
    )
    if L is None or L <= 0 or mt is None or mt.n < 8:
        return sig.untestable(method + ": no reliable steps to test on", 0.0, "x")
    se = sig.ratio_log_se(mt.commit, np.ones(mt.n), sig.blocks(mt.rid, split_short=True))
    return sig.z_test(
        math.log(threshold / L),
        float("nan") if se is None else se,
        min_effect=0.0,
        method=method,
        unit="x",
        log_ratio=True,
    )


# --- chunk_coalescing --------------------------------------------------------------------------
# A validity check, decided by counting (chunks vs the server's verify steps, chunk sizes, gap
# multiples; analysis/steps/reconstruct.py), not by sampling: reported whenever the reconstruction says so.


# Plain decoding whose token chunks carry one same size k >= 2 this often streams k steps per
# chunk by setting (a stream interval): the steps are real but their times are averages. A
# consumer that fell behind (vLLM's output processor under load) or a late read merges
# irregularly and is not this.
REGULAR_CHUNK_SHARE = 0.8


def _plain_merged_chunks(f: Facts) -> float | None:
    """With speculation off, the tokens every chunk carries when chunks regularly merge steps."""
    if not f.speculation.off:
        return None
    sizes = [c.n_tokens for r in f.measured.main for c in r.chunks if c.n_tokens > 0]
    if len(sizes) < 8:
        return None
    values, counts = np.unique(sizes, return_counts=True)
    k = int(values[counts.argmax()])
    return float(k) if k >= 2 and counts.max() >= REGULAR_CHUNK_SHARE * len(sizes) else None


def _plain_coalescing(f: Facts, per_chunk: float) -> Claim:
    return Claim(
        id="chunk_coalescing",
        summary=f"Streamed chunks carry {per_chunk:.0f} tokens each while the server decodes "
        "one token a step: each chunk merges several steps, so step times are averages over "
        "them and per-step effects (drift, stalls) are seen blurred.",
        evidence=[
            _ev("median tokens per chunk", per_chunk, "tokens", "client chunks"),
            _ev("speculation", f.speculation.reason, "", "speculation state"),
        ],
        next=advice.chunk_coalescing(f.flavor),
        test=None,
    )


def _whole_stream(f: Facts) -> Claim:
    """Every main request in one read: not a stream interval's merge of a few steps but a
    generation held back whole (a proxy buffering the SSE stream, an interval past max_tokens)."""
    n = len(f.measured.main)
    return Claim(
        id="chunk_coalescing",
        summary=f"Each of the {n} main request(s) arrived in one read, every token at once: the "
        "stream is held back until the generation ends, so its users wait for the whole answer "
        "and no step, commit length or decode rate can be read from it.",
        evidence=[
            _ev("requests delivered whole", float(n), "requests", "client reads"),
            _ev(
                "tokens per request",
                float(np.median([r.tokens_received for r in f.measured.main])),
                "tokens",
                "client reads",
            ),
        ],
        next=advice.whole_stream(f.flavor),
        test=None,
    )


def chunk_coalescing(f: Facts) -> Claim | None:
    if all_delivered_whole(f.measured.main):
        return _whole_stream(f)
    if f.measured.reliable is not False:
        per_chunk = _plain_merged_chunks(f)
        return _plain_coalescing(f, per_chunk) if per_chunk is not None else None
    source = f.measured.commit_len_source or "nowhere: no server telemetry (--logs, --metrics-url)"
    return Claim(
        id="chunk_coalescing",
        summary="Streamed chunks merge several verify steps, so client-side step times and "
        f"commit lengths are unreliable; commit length comes from {source}.",
        evidence=[_ev("reason", r, "", "client chunks") for r in f.measured.reasons]
        + [
            _ev(
                "decided by",
                "counting checks of the stream (not a sampled effect)",
                "",
                "analysis/steps/reconstruct.py",
            )
        ],
        next=advice.chunk_coalescing(f.flavor),
        test=None,
    )


# --- client_limited ----------------------------------------------------------------------------
# A validity check, decided by counting (the client's loop-lag samples against the median step;
# analysis/client_health.py): when it holds, the claims resting on the client's stamps
# (the cards' `timed_by_client`) are not made.


def client_limited(f: Facts) -> Claim | None:
    h = f.client
    if h is None or not h.limits_step_time:
        return None
    src = "client.jsonl (the client's loop-lag samples)"
    return Claim(
        id="client_limited",
        summary=f"The measuring client was the limit: {h.reason}. Tokens/s, commit length and "
        "step time are reported; step-time and acceptance claims are not made.",
        evidence=[
            _ev("client loop lag, mean during decode", h.lag_mean_s, "s", src),
            _ev("client loop lag p99 during decode", h.lag_p99_s, "s", src),
            _ev("client loop lag p50 during decode", h.lag_p50_s, "s", src),
            _ev("median step time", h.median_step_s, "s", "client steps"),
            _ev("chunk gaps shorter than the p99 lag", h.short_gap_share, "share", src),
        ],
        next=advice.client(f.flavor),
        test=None,
    )


# --- acceptance_decay --------------------------------------------------------------------------
# Decay matters when commit length falls by >= 10% over the user's generation (smaller changes
# are within content-to-content variation of real drafters). Tested within requests (request
# fixed effects: one hard prompt is not a decay), with the window cliff as a covariate when the
# model search found one, errors cluster-robust over 64-step blocks. Shapes tried: a step down
# after output position T for each T in DECAY_CUTS (the honeymoon: early tokens are easy) and a
# linear fall; the best one decides, its p multiplied by the shapes tried (Bonferroni). The cuts
# at 16 and 32: a drafter that loses its source as soon as the output leaves the prompt (an
# n-gram index of the prompt alone, on a model that loops early) falls there, not at 64 (H200:
# 1.62 -> 1.14 after token 16, a +7% fall read at 64); bench/false_findings.py: the same
# false-finding and detection rates with and without them.
MIN_DECAY = BY_ID["acceptance_decay"].min_effect
DECAY_CUTS = (16, 32, 64, 128, 256, 512, 1024)
DECAY_SHAPES = len(DECAY_CUTS) + 1  # the steps and the linear fall


@dataclass(frozen=True)
class _DecayShape:
    test: sig.Test
    kind: str  # "step" | "linear"
    at: float | None
    before: float
    after: float


def _long_requests(t: StepTable | None, min_steps: int) -> StepTable | None:
    """Only the requests with at least `min_steps` steps: a within-request contrast from a
    short request is one draw of content's slow wander, and its serial correlation cannot be
    estimated from it."""
    if t is None or not t.n:
        return t
    ids, counts = np.unique(t.rid, return_counts=True)
    keep = np.isin(t.rid, ids[counts >= min_steps])
    return type(t)(t.commit[keep], t.step_s[keep], t.context[keep], t.pos[keep], t.rid[keep])


DECAY_MIN_STEPS = int(BY_ID["acceptance_decay"].thresholds["min steps a request needs"])


def _decay_test(f: Facts, a: AcceptanceFit | None) -> _DecayShape | None:
    t = _long_requests(_complete_steps(f.shape.table), DECAY_MIN_STEPS)
    if t is None or t.n < 40:
        return None
    method = (
        f"OLS of commit length on output position over requests of >= {DECAY_MIN_STEPS} "
        "steps, with request fixed effects, SE inflated for serial correlation "
        "(Newey-West, 64 lags)"
    )
    extra = []
    if a is not None and a.window is not None and a.window.at is not None:
        extra.append((t.context > a.window.at).astype(float))
        method += ", window cliff as a covariate"
    # the positions the steps cover, not the generation's: a loop's steps are left out of the
    # table, and a slope fitted over the first 320 tokens and carried to 1,500 once said
    # "5.86 -> -15.68 tokens/step" (H200, prose-edit)
    span = min(f.span.output_span or np.inf, float(np.ptp(t.pos)))
    shapes: list[_DecayShape] = []
    for cut in DECAY_CUTS:
        above = t.pos > cut
        before = float(t.commit[~above].mean()) if (~above).any() else 0.0
        if above.sum() < 20 or (~above).sum() < 20 or before <= 0 or cut >= span:
            continue
        beta, se, df = sig.fe_ols(t.commit, np.column_stack([above.astype(float), *extra]), t.rid)
        test = sig.z_test(
            -float(beta[0]) / before,
            float(se[0]) / before,
            min_effect=MIN_DECAY,
            unit="fraction",
            df=df,
            tests=DECAY_SHAPES,
            method=f"{method}: step after output position {cut}",
        )
        shapes.append(_DecayShape(test, "step", float(cut), before, before + float(beta[0])))
    if span > 0:
        beta, se, df = sig.fe_ols(t.commit, np.column_stack([t.pos / 1000.0, *extra]), t.rid)
        level = float(t.commit.mean()) - float(beta[0]) * float(t.pos.mean()) / 1000.0
        if level > 0:
            scale = span / 1000.0 / level
            test = sig.z_test(
                -float(beta[0]) * scale,
                float(se[0]) * scale,
                min_effect=MIN_DECAY,
                unit="fraction",
                df=df,
                tests=DECAY_SHAPES,
                method=f"{method}: linear, relative drop over {span:.0f} output tokens",
            )
            shapes.append(_DecayShape(test, "linear", None, level, level * (1 - test.effect)))
    if not shapes:
        return None
    return min(shapes, key=lambda d: d.test.p)


def acceptance_decay(f: Facts) -> Claim | None:
    a = f.shape.fit
    shape = _decay_test(f, a)
    if shape is None:
        return None
    src_acc = f.shape.source or _src_steps(f)
    where = (
        f"after output position ~{shape.at:.0f}" if shape.kind == "step" else "along the generation"
    )
    drop = 1 - shape.after / shape.before if shape.before > 0 else 0.0
    ev = [
        _ev("mean commit length early", shape.before, "tokens/step", src_acc),
        _ev("mean commit length late", shape.after, "tokens/step", src_acc),
        _ev("relative drop", drop, "", "within-request fit"),
        _ev("shape", shape.kind, "", "best of the shapes tested"),
        *_cost_ev(f.shape.decay_cost, "mean early / mean overall"),
    ]
    if a is not None and a.decay is not None:
        ev.append(
            _ev(
                "acceptance model search (BIC) chose",
                a.model,
                "",
                f"decay {a.decay.before:.2f} -> {a.decay.after:.2f} tokens/step",
            )
        )
    if f.two_point.honeymoon:
        hm = f.two_point.honeymoon
        ev.append(
            _ev(
                f"first {hm.window_tokens} tokens overstate the long-generation commit length by",
                hm.commit_overstatement,
                "",
                src_acc,
            )
        )
    return Claim(
        id="acceptance_decay",
        summary=f"Commit length falls with output position: {shape.before:.2f} -> "
        f"{shape.after:.2f} tokens/step {where} ({drop:.0%} drop); early tokens are easy.",
        evidence=ev,
        next=advice.acceptance_decay(f.flavor),
        test=shape.test,
        factor=_family_factors(f).get("acceptance_decay"),
    )


# --- draft_window ------------------------------------------------------------------------------
# A cliff at the drafter's window: commit length steps down once the context passes W. Two tests,
# the better one decides (its p doubled, Bonferroni over the two):
# - within requests that cross W (request fixed effects: one hard prompt is not a cliff), with
#   output position as a covariate (so a decay is not read as a cliff), errors cluster-robust over
#   64-step blocks, the p-value multiplied by the cuts the change-point search tried;
# - across requests: early commit length (output position < EARLY_POS) by prompt length, the
#   largest drop over every cut against the same maximum with the requests shuffled (a
#   permutation test that pays for the search).
# The model search has already required the cliff to show across requests
# (acceptance._confirm_window), which is what tells a window from a decay. It matters from a 10%
# drop.
MIN_WINDOW = BY_ID["draft_window"].min_effect
MIN_EARLY_STEPS = 3  # early steps a request needs to count in the across-request test
# A window the server states (SGLang's speculative_draft_window_size, our engine's) explains a
# cliff found within this many tokens of it (the change-point range widened by it).
STATED_WINDOW_SLACK = int(BY_ID["draft_window"].thresholds["stated window slack (tokens)"])
STATED_WINDOW_SLACK_SHARE = BY_ID["draft_window"].thresholds["slack share"]


def _stated_window_explains(stated: int, lo: float, hi: float) -> bool:
    slack = max(STATED_WINDOW_SLACK, STATED_WINDOW_SLACK_SHARE * stated)
    return lo - slack <= stated <= hi + slack


def _window_within(f: Facts, at: float, before: float) -> sig.Test:
    t = _complete_steps(f.shape.table)
    method = (
        "OLS of commit length on [context > W] and output position with request fixed "
        "effects, SE inflated for serial correlation (Newey-West, 64 lags)"
    )
    if t is None or t.n < 40 or before <= 0:
        return sig.untestable(method + ": too few steps", MIN_WINDOW, "fraction")
    x = np.column_stack([(t.context > at).astype(float), t.pos / 1000.0])
    beta, se, df = sig.fe_ols(t.commit, x, t.rid)
    # the cut was searched over COARSE_CUTS candidates, and this is one of two tests
    return sig.z_test(
        -float(beta[0]) / before,
        float(se[0]) / before,
        min_effect=MIN_WINDOW,
        method=method,
        unit="fraction",
        df=df,
        tests=2 * COARSE_CUTS,
    )


def _window_across(f: Facts) -> sig.Test:
    t = _complete_steps(f.shape.table)
    method = (
        "permutation test over requests of the largest drop of early commit length "
        "between prompt lengths"
    )
    if t is None or t.n == 0:
        return sig.untestable(method + ": no steps", MIN_WINDOW, "fraction")
    early = t.pos < EARLY_POS
    prompts, means = [], []
    for r in np.unique(t.rid):
        sel = early & (t.rid == r)
        if sel.sum() >= MIN_EARLY_STEPS:
            prompts.append(float(np.median(t.context[sel] - t.pos[sel])))
            means.append(float(t.commit[sel].mean()))
    pr, mv = np.asarray(prompts), np.asarray(means)
    res = sig.max_split_permutation(mv, pr, rng=np.random.default_rng(0))
    if res is None:
        return sig.untestable(method + ": one prompt length", MIN_WINDOW, "fraction")
    cut, _, p = res
    two = sig.two_sample_log(
        mv[pr <= cut],
        mv[pr > cut],
        min_effect=1 / (1 - MIN_WINDOW) - 1,
        method="drop at the cut",
        tests=2 * max(1, np.unique(pr).size - 1),
    )

    def drop(ratio_minus_1: float) -> float:  # below/above - 1 -> 1 - above/below
        return 1 - 1 / (1 + ratio_minus_1) if ratio_minus_1 > -1 else float("-inf")

    return sig.Test(
        method=f"{method} ({mv.size} requests, best cut at prompt {cut:.0f}); {two.method}",
        effect=drop(two.effect),
        ci=(drop(two.ci[0]), drop(two.ci[1])),
        p=p,
        min_effect=MIN_WINDOW,
        unit="fraction",
        statistic=two.statistic,
        p_material=two.p_material,
    )


def _window_test(f: Facts, at: float, before: float) -> sig.Test:
    across = _window_across(f)
    across = dataclasses.replace(across, p=min(1.0, 2 * across.p))  # one of two tests
    best = min((_window_within(f, at, before), across), key=lambda x: x.p)
    return dataclasses.replace(best, method=best.method + " (the better of two tests)")


def draft_window(f: Facts) -> Claim | None:
    a = f.shape.fit
    if a is None or a.window is None:
        return None
    w = a.window
    src_acc = f.shape.source or _src_steps(f)
    lo, hi = w.at_range or (w.at or 0.0, w.at or 0.0)
    ev = [
        _ev(
            "window estimate (first context with low acceptance)",
            hi,
            "tokens",
            "change-point search",
        ),
        _ev("window lies above", lo, "tokens", "change-point search"),
        _ev("commit length below the window", w.before, "tokens/step", src_acc),
        _ev("commit length above the window", w.after, "tokens/step", src_acc),
        *_cost_ev(f.shape.window_cost, "commit length without the cliff / observed"),
    ]
    drop = (
        f"Acceptance drops once the context exceeds ~{hi:.0f} tokens "
        f"({w.before:.2f} -> {w.after:.2f} tokens/step)"
    )
    stated = stated_draft_window(f.measured.run.info.server_info)
    # the mechanism is the cause's to name (causes.py): the window where the server states one
    # at the drop, else the window or text at that length this drafter guesses poorly
    mechanism = "the drafter's window" if stated else "a drafter window, or harder text there"
    summary, next_ = f"{drop}: {mechanism}.", advice.draft_window(f.flavor, hi)
    if stated is not None:
        ev.append(
            _ev("draft window the server states", stated[0], "tokens", f"server info: {stated[1]}")
        )
        if not _stated_window_explains(stated[0], lo, hi):
            # The drop is measured; its cause is not the window the server runs with.
            summary = (
                f"{drop}, but the server's draft window is {stated[0]} tokens: not the "
                "window; the text at that length is harder for this drafter."
            )
            next_ = advice.context_cliff(hi, stated[0])
    return Claim(
        id="draft_window",
        summary=summary,
        evidence=ev,
        next=next_,
        test=_window_test(f, w.at if w.at is not None else hi, w.before),
        factor=_family_factors(f).get("draft_window"),
        cap=0.99 if a.separable else 0.5,
    )


# --- speculation_overhead ----------------------------------------------------------------------
def _overhead_summary(split: Split, spec_tps: float | None, plain_tps: float | None) -> str:
    """The slowdown in the model's terms: tps ratio = step cost ratio / tokens-per-step ratio."""
    ratio, step_cost = split.tps_ratio, split.step_time_factor
    more_tokens = 1.0 / split.acceptance_factor if split.acceptance_factor else float("nan")
    rates = f"{spec_tps or 0:.1f} vs {plain_tps or 0:.1f} tok/s plain"
    if ratio >= 1:
        return (
            f"Speculation makes this server {ratio:.2f}x slower ({rates}): each verify step "
            f"costs {step_cost:.2f}x a plain step and commits {more_tokens:.2f}x more tokens."
        )
    return (
        f"Speculation makes this server {1 / ratio:.2f}x faster ({rates}): each verify step "
        f"costs {step_cost:.2f}x a plain step and commits {more_tokens:.2f}x more tokens."
    )


# Against a plain baseline: slower by >= 5% (bootstrap interval of the tps ratio). Without one:
# under 1.5 tokens/step speculation wins only if a verify step costs < 1.5 plain steps, which a
# multi-token verify plus drafting rarely does; that step cost is not measured, so the claim is a
# hypothesis (confidence <= 0.5) whose `next` measures it.
MIN_OVERHEAD = BY_ID["speculation_overhead"].min_effect
OVERHEAD_COMMIT = BY_ID["speculation_overhead"].thresholds["commit length without a baseline"]


def _overhead_untestable(f: Facts) -> Claim:
    """A plain baseline is always tested against: without a decode split the claim says why
    the test could not be run."""
    return Claim(
        id="speculation_overhead",
        summary="Speculation against plain decoding: not testable (no decode split).",
        evidence=[],
        next=advice.speculation_overhead(f.flavor),
        test=sig.untestable(
            "tps ratio plain/speculative: the baseline or this run has no usable decode window",
            MIN_OVERHEAD,
            "x",
        ),
    )


def _overhead_test(f: Facts, split: Split, split_ci: SplitCI | None) -> sig.Test:
    """The tps ratio against plain decoding tested on its bootstrap interval, or, with one
    request a side (no interval), on the observed decode time's spread."""
    method = "tps ratio plain/speculative, bootstrap 95% interval (z on the log)"
    lr = sig.log_ratio_from_ci(split.tps_ratio, split_ci.tps_ratio) if split_ci else None
    if lr is None and split.tps_ratio > 0:
        # one request a side: the observed decode time's spread, taken for both sides
        se_t = _decode_time_log_se(f)
        if se_t is not None:
            lr = (math.log(split.tps_ratio), math.sqrt(2.0) * se_t)
            method = (
                "tps ratio plain/speculative, one request a side: z on the log with "
                "the observed decode time's block SE for both sides"
            )
    return (
        sig.z_test(
            *_with_content(lr, 1, f),
            min_effect=MIN_OVERHEAD,
            unit="x",
            method=method + ", widened by the content variance",
            log_ratio=True,
        )
        if lr
        else sig.untestable(method + ": no interval", MIN_OVERHEAD, "x")
    )


def _overhead_against_plain(
    f: Facts, h: Decomposition, split: Split, split_ci: SplitCI | None
) -> Claim:
    """The overhead measured against a plain baseline: the slowdown's split into step cost and
    tokens per step, decided by the tps ratio's test."""
    test = _overhead_test(f, split, split_ci)
    plain_tps = f.baseline.decomposition.decode_tps
    return Claim(
        id="speculation_overhead",
        summary=_overhead_summary(split, h.decode_tps, plain_tps),
        evidence=[
            _ev("decode tps with speculation", h.decode_tps, "tok/s", _src_steps(f)),
            _ev("decode tps plain (baseline)", plain_tps, "tok/s", "baseline run"),
            _ev(
                "mean commit length", h.mean_commit_len, "tokens/step", f.measured.commit_len_source
            ),
            _ev("step time ratio spec/plain", split.step_time_factor, "x", "attribution"),
        ],
        next=advice.speculation_overhead(f.flavor),
        test=test,
        factor=_family_factors(f).get("speculation_overhead"),
    )


def speculation_overhead(f: Facts) -> Claim | None:
    h, split, split_ci = f.measured.decomposition, _split(f), _split_ci(f)
    L = h.mean_commit_len if h else None
    if _plain_baseline(f) and (split is None or h is None):
        # a plain baseline is always tested against; without a split the test says why not
        return _overhead_untestable(f)
    if _plain_baseline(f) and split is not None and h is not None:
        return _overhead_against_plain(f, h, split, split_ci)
    if L is None or L >= OVERHEAD_COMMIT or _plain_baseline(f):
        return None
    if f.never_accepted is not None:
        # certain without a baseline: a verify step runs the target at least as a plain step
        # does, plus the drafting, and commits what a plain step commits
        summary = (
            f"Drafts are almost never accepted ({L:.2f} tokens per verify step): speculation "
            "cannot pay here, every verify step costs a plain step plus the drafting."
        )
        cap = 0.99
    else:
        summary = (
            f"Only {L:.2f} tokens per verify step: speculation probably costs more than it "
            f"saves (a verify step must cost < {L:.2f} plain steps to break even)."
        )
        cap = 0.5
    return Claim(
        id="speculation_overhead",
        summary=summary,
        evidence=[
            _ev("mean commit length", L, "tokens/step", f.measured.commit_len_source),
            _ev("mean step time", h.mean_step_s if h else None, "s", _src_steps(f)),
        ],
        next=advice.speculation_unmeasured(f.flavor),
        test=_commit_below(f, OVERHEAD_COMMIT, "break-even of a verify step"),
        cap=cap,
    )


# --- acceptance_low ----------------------------------------------------------------------------
# With a baseline: commit length the shape (decay, window) does not explain is >= 10% below the
# baseline's, tested on the bootstrap interval of the acceptance factor (two long generations
# differ by a few % by chance). Without one: mean commit length under 2.0 tokens/step is "low":
# tree/block drafters (DDTree, DFlash, EAGLE) commit 3-6 on chat text; under 2 the drafter adds
# at most one token.
MIN_LOW_RELATIVE = BY_ID["acceptance_low"].min_effect
LOW_COMMIT_ABSOLUTE = BY_ID["acceptance_low"].thresholds["commit length without a baseline"]


def acceptance_low(f: Facts) -> Claim | None:
    h, split, split_ci = f.measured.decomposition, _split(f), _split_ci(f)
    L = h.mean_commit_len if h else None
    if L is None or _plain_baseline(f):
        return None
    if split is not None and f.baseline is not None:
        base_commit = f.baseline.decomposition.mean_commit_len
        residual = _family_factors(f).get("acceptance_low")
        if residual is None or residual <= 0:
            return None
        method = "acceptance factor beyond the shape's costs, bootstrap 95% interval (z on the log)"
        lr = (
            sig.log_ratio_from_ci(split.acceptance_factor, split_ci.acceptance_factor)
            if split_ci
            else None
        )
        test = (
            sig.z_test(
                *_with_content((math.log(residual), lr[1]), 2, f),
                unit="x",
                min_effect=MIN_LOW_RELATIVE,
                log_ratio=True,
                method=method + ", widened by the content variance of both prompts",
            )
            if lr
            else sig.untestable(method + ": no interval", MIN_LOW_RELATIVE, "x")
        )
        return Claim(
            id="acceptance_low",
            summary=f"Commit length {L:.2f} is below the baseline's "
            f"{base_commit:.2f} tokens/step beyond what its shape explains "
            f"(x{residual:.2f}).",
            evidence=[
                _ev("mean commit length", L, "tokens/step", f.measured.commit_len_source),
                _ev("baseline mean commit length", base_commit, "tokens/step", "baseline run"),
                _ev("acceptance factor", split.acceptance_factor, "x", "attribution"),
            ],
            next=advice.acceptance_below_baseline(f.flavor),
            test=test,
            factor=residual,
        )
    if f.baseline is not None or L >= LOW_COMMIT_ABSOLUTE:
        return None
    return Claim(
        id="acceptance_low",
        summary=f"Mean commit length is {L:.2f} tokens/step: the drafter rarely gets more "
        "than one draft accepted.",
        evidence=[_ev("mean commit length", L, "tokens/step", f.measured.commit_len_source)],
        next=advice.acceptance_low(f.flavor),
        test=_commit_below(f, LOW_COMMIT_ABSOLUTE, "tree/block drafters commit 3-6"),
    )


# --- step_time_drift ---------------------------------------------------------------------------
# Drift: the output-position slope of the joint robust step-time fit (analysis/fits/steptime.py:
# Huber regression, SE inflated for lag-1 autocorrelation), with context held fixed. It matters
# when the drift over the user's generation is >= 10% of the mean step (DRIFT_MIN_SHARE: below
# that it moves tps by < 10%, inside run-to-run variation of real services).


MIN_SLOPE_STEPS = 64  # steps a main request needs for its own drift slope


def _request_slopes(t: StepTable, fit: StepTimeFit) -> list[tuple[float, float]]:
    """(slope, its standard error) of step time on output position within each main request,
    after the context term, the error inflated for lag-1 autocorrelation."""
    out = []
    for r in np.unique(t.rid):
        sel = t.rid == r
        if sel.sum() < MIN_SLOPE_STEPS or np.ptp(t.pos[sel]) == 0:
            continue
        y = t.step_s[sel] - fit.per_context_token * t.context[sel]
        x = t.pos[sel]
        slope, icpt = np.polyfit(x, y, 1)
        resid = y - (slope * x + icpt)
        rho = float(np.clip(np.corrcoef(resid[:-1], resid[1:])[0, 1], 0.0, 0.95))
        se = np.sqrt(resid.var(ddof=2) / ((x - x.mean()) ** 2).sum())
        out.append((float(slope), float(se * np.sqrt((1 + rho) / (1 - rho)))))
    return out


def _within_requests(f: Facts) -> tuple[float, float] | None:
    """The random-effects (DerSimonian-Laird) mean of the main requests' own drift slopes and
    its standard error: their own errors plus how much the slopes vary beyond them. None with
    fewer than two requests long enough for a slope of their own."""
    fit, t = f.step_time.fit, f.timed_main_table
    if fit is None or t is None or not t.n:
        return None
    slopes = _request_slopes(t, fit)
    if len(slopes) < 2:
        return None
    b = np.asarray([s for s, _ in slopes])
    w = 1.0 / np.maximum(np.asarray([e for _, e in slopes]) ** 2, 1e-30)
    pooled = (w * b).sum() / w.sum()
    q = float((w * (b - pooled) ** 2).sum())
    tau2 = max(0.0, (q - (len(b) - 1)) / (w.sum() - (w**2).sum() / w.sum()))
    w_re = 1.0 / (1.0 / w + tau2)
    return float((w_re * b).sum() / w_re.sum()), float(np.sqrt(1.0 / w_re.sum()))


def _fit_se(f: Facts) -> tuple[dict[str, float], int] | None:
    """Cluster-robust (64-step blocks) standard errors of the step-time fit's coefficients in
    s/token, from its residuals (significance.huber_sandwich); None when the steps are gone."""
    fit, t = f.step_time.fit, f.step_table
    if fit is None or t is None or not t.n:
        return None
    ok = np.isfinite(t.step_s) & np.isfinite(t.context) & (t.step_s > 0)
    if int(ok.sum()) != fit.residuals.size or np.std(t.context[ok]) == 0:
        return None
    cols, names = [np.ones(int(ok.sum())), t.context[ok] / KTOK], ["s0", "per_context_token"]
    if fit.per_output_token is not None:
        cols.append(t.pos[ok] / KTOK)
        names.append("per_output_token")
    if fit.per_commit_token is not None:
        cols.append(t.commit[ok])
        names.append("per_commit_token")
    keep = fit.kept
    se, g = sig.huber_sandwich(
        np.column_stack(cols)[keep],
        fit.residuals[keep],
        HUBER_K * fit.sigma,
        sig.blocks(t.rid[ok][keep]),
    )
    per = {"per_context_token": KTOK, "per_output_token": KTOK}
    return {n: float(v) / per.get(n, 1.0) for n, v in zip(names, se, strict=True)}, g


def _drift_estimate(
    f: Facts, dr: DriftTest, fit: StepTimeFit
) -> tuple[float, float, int | None, str]:
    """(slope s/token, its standard error, df or None, the method in words) the drift is judged
    by: the joint fit's slope with the larger of its errors, checked against the main requests'
    own slopes."""
    se_slope = (dr.ci[1] - dr.ci[0]) / (2 * sig.Z95)
    method = (
        "robust (Huber) regression slope of step time on output position at fixed "
        f"context, SE inflated for autocorrelation (rho={fit.autocorr:.2f})"
    )
    df = None
    robust = _fit_se(f)
    if robust is not None and "per_output_token" in robust[0]:
        # the larger of the model-based and the cluster-robust error: neither alone is safe
        se_slope = max(se_slope, robust[0]["per_output_token"])
        df = robust[1] - 1
        method += " or cluster-robust over 64-step blocks (sandwich), the larger"
    slope = dr.slope_s_per_token
    within = _within_requests(f)
    if within is not None and within[1] > se_slope:
        # the main requests disagree beyond their own noise (a load that came and went on a
        # shared machine slows one request's end, not every request's): the drift is judged by
        # how much the requests' own slopes vary
        se_slope = within[1]
        method += "; between-request (random-effects) error over the main requests, larger"
    if within is not None and within[0] < slope:
        # the joint fit also reads the main requests against the shorter ones, run at other
        # moments: a machine busier during the long generations passes for drift there (the
        # CPU matrix beside a test run, a clean server: +18% joint, +7% within). The drift
        # must show within the generations themselves.
        slope = within[0]
        method += "; the main requests' own slopes (random-effects mean), smaller"
    return slope, se_slope, df, method


def step_time_drift(f: Facts) -> Claim | None:
    dr, fit = f.step_time.drift, f.step_time.fit
    if dr is None or fit is None:
        return None
    slope, se_slope, df, method = _drift_estimate(f, dr, fit)
    scale = dr.span_tokens / dr.mean_step_s if dr.mean_step_s > 0 else float("nan")
    test = sig.z_test(
        slope * scale,
        se_slope * scale,
        min_effect=DRIFT_MIN_SHARE,
        unit="fraction of the mean step",
        method=method + "; effect = drift over the generation / mean step",
        df=df,
    )
    within = slope != dr.slope_s_per_token
    return Claim(
        id="step_time_drift",
        summary=f"Step time grows with output position beyond what context explains: "
        f"+{slope * 1e3 * 1000:.2f} ms per 1000 output tokens "
        f"(+{slope * scale:.0%} of the mean step over {dr.span_tokens:.0f} tokens).",
        evidence=[
            _ev(
                "drift slope",
                dr.slope_s_per_token,
                "s/token",
                "robust regression, steps of all requests",
            ),
            _ev("drift slope 95% CI low", dr.ci[0], "s/token", "robust regression"),
            _ev("drift slope 95% CI high", dr.ci[1], "s/token", "robust regression"),
            *(
                [
                    _ev(
                        "drift slope within the main requests",
                        slope,
                        "s/token",
                        "random-effects mean",
                    )
                ]
                if within
                else []
            ),
            _ev("drift over the generation", dr.total_drift_s, "s", "slope x output span"),
            _ev("per-step noise sd", dr.noise_sd, "s", "robust residual sd"),
            _ev("context slope", fit.per_context_token, "s/token", "same regression"),
            *_cost_ev(f.step_time.drift_cost, "mean step / mean step without drift"),
        ],
        next=advice.step_time_drift(f.flavor),
        test=test,
        factor=_family_factors(f).get("step_time_drift"),
    )


# --- context_scaling ---------------------------------------------------------------------------
# Worth stating when the context term is >= 15% of the step time at the measured context (robust
# regression slope, z test). With one prompt length the growth along the generation cannot be
# split into context and drift: then it is a hypothesis (confidence <= 0.35), stated from 25%.
CONTEXT_SHARE = BY_ID["context_scaling"].min_effect
CONFOUNDED_GROWTH = BY_ID["context_scaling"].thresholds["confounded growth"]


def _context_confounded(
    f: Facts, fit: StepTimeFit, g: float, z: float, method: str, factor: float | None
) -> Claim:
    """With one prompt length, growth along the generation is context or drift, not both
    separately: stated as a hypothesis (capped confidence) that a second length would settle."""
    return Claim(
        id="context_scaling",
        summary=f"Step time grows {g:.0%} along the generation, but with one prompt length "
        "context growth and output-length drift cannot be told apart.",
        evidence=[
            _ev("step-time growth start->end", g, "", _src_steps(f)),
            _ev(
                "slope along the generation",
                fit.per_context_token,
                "s/token",
                "robust regression",
            ),
        ],
        next=advice.context_confounded(f.flavor),
        test=sig.z_test(
            g,
            g / z if z else float("nan"),
            min_effect=CONFOUNDED_GROWTH,
            method=method + " (context and output position confounded)",
            unit="fraction",
        ),
        factor=factor,
        cap=0.35,
    )


def context_scaling(f: Facts) -> Claim | None:
    fit = f.step_time.fit
    if fit is None:
        return None
    se = fit.se.get("per_context_token", float("inf"))
    method = (
        "robust (Huber) regression slope of step time on context, SE inflated for autocorrelation"
    )
    robust = _fit_se(f)
    if robust is not None:
        se = max(se, robust[0]["per_context_token"])
        method += " or cluster-robust over 64-step blocks (sandwich), the larger"
    z = fit.per_context_token / se if se > 0 and math.isfinite(se) else 0.0
    factor = _family_factors(f).get("context_scaling")
    if fit.identifiable is False and f.step_time.growth_along_generation is not None:
        g = f.step_time.growth_along_generation
        return _context_confounded(f, fit, g, z, method, factor)
    share = f.step_time.context_share
    if share is None:
        return None
    return Claim(
        id="context_scaling",
        summary=f"Step time grows with context as attention-bound decode should: "
        f"{fit.per_context_token * 1e6:.2f} us per context token, "
        f"{share:.0%} of the step at this context.",
        evidence=[
            _ev("s0", fit.s0, "s", "robust regression"),
            _ev("per context token", fit.per_context_token, "s/token", "robust regression"),
            _ev("share of step time at the measured context", share, "", "model"),
            _ev("r2", fit.r2, "", "robust regression"),
        ],
        next=advice.context_scaling(f.flavor),
        test=sig.z_test(
            share,
            share / z if z else float("nan"),
            min_effect=CONTEXT_SHARE,
            method=method + "; effect = context term / step at the main context",
            unit="fraction",
        ),
        factor=factor,
    )


# --- two_point_bias ----------------------------------------------------------------------------
# The two-point window reads >= 15% above the full generation beyond what the context difference
# explains (repeat-to-repeat spread of a quiet service is < 10%; 15% changes capacity planning).
# Tested over requests: the two-point repeats' rates against the full generation's (context-
# adjusted), on the log scale; two repeats give one degree of freedom, so only a large bias is
# significant with them (as it should be: "17-79% above" from two ~30-step repeats is chance).
TWO_POINT_BIAS = BY_ID["two_point_bias"].min_effect


def _two_point_test(f: Facts, tp: TwoPoint, full_adj: float) -> sig.Test:
    """With reliable steps: the window's own steps (tokens/s of the N2 requests past N1)
    against the full generation's, both cluster-robust over 64-step blocks, plus one prompt's
    content variance a side (normal). Without: the repeats' rates, over requests."""
    method = "two-point window rate / context-adjusted full-generation rate"
    w, mt = f.two_point.window, f.main_table
    if w is not None and mt is not None and w.n >= 8 and mt.n >= 8:
        blocks_w, blocks_m = sig.blocks(w.rid), sig.blocks(mt.rid)
        se_w = sig.ratio_log_se(w.commit, w.step_s, blocks_w)
        se_m = sig.ratio_log_se(mt.commit, mt.step_s, blocks_m)
        if se_w is not None and se_m is not None:
            rate_w = float(w.commit.sum() / w.step_s.sum())
            se = math.sqrt(se_w**2 + se_m**2 + 2 * _content_var(f))
            # a window of two short repeats is two blocks: its SE has one degree of freedom,
            # so the test is Student t with the Welch degrees of freedom of the two SEs
            df = sig.welch_df(
                [(se_w**2, sig.n_clusters(blocks_w)), (se_m**2, sig.n_clusters(blocks_m))]
            )
            return sig.z_test(
                math.log(rate_w / full_adj),
                se,
                min_effect=TWO_POINT_BIAS,
                unit="x",
                log_ratio=True,
                df=df,
                method=f"{method}: t test on the log of the window's {w.n} steps vs the full "
                f"generation's {mt.n}, cluster-robust over 64-step blocks (Welch df "
                f"{df or float('inf'):.1f}), plus between-prompt content variance a side",
            )
    return sig.two_sample_log(
        tp.rates, [full_adj], min_effect=TWO_POINT_BIAS, method=method, extra_var=_content_var(f)
    )


def _two_point_evidence(
    f: Facts, tp: TwoPoint, h: Decomposition, over: float, ctx_f: float, over_adj: float
) -> list[Evidence]:
    """The numbers behind the bias: both rates, how much of the gap context explains, and the
    window's commit length and step time beside the full generation's, which say why."""
    src_steps = _src_steps(f)
    ev = [
        _ev(
            f"two-point decode tps (max_tokens {tp.n1}->{tp.n2})",
            tp.decode_tps,
            "tok/s",
            "two_point requests",
        ),
        _ev("full-generation decode tps", h.decode_tps, "tok/s", src_steps),
        _ev("overstatement", over, "", "ratio - 1"),
        _ev("of which the context difference explains", ctx_f, "x", "step-time model"),
        _ev("overstatement beyond context", over_adj, "", "ratio / context factor - 1"),
        _ev("two-point repeats", tp.repeats, "", "two_point requests"),
        _ev("two-point prompt", tp.prompt_tokens, "tokens", "two_point requests"),
    ]
    if f.two_point.honeymoon is not None:
        hm = f.two_point.honeymoon
        ev.append(
            _ev(
                "commit length in the window (full generation)",
                hm.window_commit_len,
                "tokens/step",
                src_steps,
            )
        )
        ev.append(
            _ev(
                "commit length over the full generation",
                hm.long_commit_len,
                "tokens/step",
                src_steps,
            )
        )
    if f.two_point.window_step_s and h.mean_step_s:
        ev.append(
            _ev(
                "step time in the two-point window",
                f.two_point.window_step_s,
                "s",
                "two_point:n2 steps",
            )
        )
        ev.append(_ev("step time over the full generation", h.mean_step_s, "s", src_steps))
    return ev


def two_point_bias(f: Facts) -> Claim | None:
    tp, h = f.two_point.estimate, f.measured.decomposition
    if (
        tp is None
        or h is None
        or not h.decode_tps
        or not f.measured.main_label.startswith("full_generation")
    ):
        return None
    over = tp.decode_tps / h.decode_tps - 1
    ctx_f = f.two_point.context_factor or 1.0
    # the part a context difference explains is not a bias of the method: allowed for
    full_adj = h.decode_tps * ctx_f
    over_adj = tp.decode_tps / full_adj - 1
    ev = _two_point_evidence(f, tp, h, over, ctx_f, over_adj)
    ctx_note = (
        f" ({over_adj:.0%} beyond what the context difference explains)"
        if abs(ctx_f - 1) > 0.05
        else ""
    )
    return Claim(
        id="two_point_bias",
        summary=f"The two-point window ({tp.n1}->{tp.n2} tokens) reads {tp.decode_tps:.1f} "
        f"tok/s, {over:.0%} above the full generation's {h.decode_tps:.1f}{ctx_note}: a short "
        "window samples the easy early tokens and the fresh KV cache.",
        evidence=ev,
        # a measurement bias, not a cause of the gap: no share of it (factor None)
        next=advice.two_point_bias(f.flavor),
        test=_two_point_test(f, tp, full_adj),
    )


# --- prefill_bound -----------------------------------------------------------------------------
# Prefill-bound when time to first token is more than half of end-to-end time, by >= 5 points
# (share >= 0.55). Over >= 3 main requests a one-sample t test of their shares; with fewer, the
# decode time's uncertainty (cluster-robust over step blocks) with TTFT as measured.
PREFILL_SHARE = BY_ID["prefill_bound"].thresholds["ttft share of e2e"]
MIN_PREFILL_EXCESS = BY_ID["prefill_bound"].min_effect


def _decode_time_log_se(f: Facts) -> float | None:
    """Relative standard error of the main requests' decode time: over their steps, or over the
    gaps between chunks when steps are unreliable (cluster-robust over blocks)."""
    mt = f.main_table
    if mt is not None and mt.n:
        return sig.ratio_log_se(mt.step_s, np.ones(mt.n), sig.blocks(mt.rid, split_short=True))
    gaps = [np.diff([c.t_ns for c in r.chunks if c.n_tokens > 0]) / 1e9 for r in f.measured.main]
    gaps = [g for g in gaps if len(g)]
    if not gaps:
        return None
    ids = np.concatenate([np.full(g.size, i) for i, g in enumerate(gaps)])
    return sig.ratio_log_se(
        np.concatenate(gaps), np.ones(ids.size), sig.blocks(ids, split_short=True)
    )


def _prefill_test(f: Facts, share: float) -> sig.Test:
    shares = np.asarray(
        [r.ttft_s / r.e2e_s for r in f.measured.main if r.ttft_s and r.e2e_s], dtype=float
    )
    if shares.size >= 3:
        se = float(shares.std(ddof=1)) / math.sqrt(shares.size)
        return sig.z_test(
            float(shares.mean()) - PREFILL_SHARE,
            se,
            df=shares.size - 1,
            min_effect=MIN_PREFILL_EXCESS,
            unit="share above 0.5",
            method=f"one-sample t test of ttft/e2e over {shares.size} requests",
        )
    method = "z test of ttft/e2e, decode-time SE cluster-robust over 64-step blocks"
    se_d = _decode_time_log_se(f)
    if f.main_table is None or not f.main_table.n:
        method += " (of chunk gaps: steps unreliable)"
    if se_d is None:
        return sig.untestable(method + ": no decode time", MIN_PREFILL_EXCESS)
    return sig.z_test(
        share - PREFILL_SHARE,
        share * (1 - share) * se_d,
        min_effect=MIN_PREFILL_EXCESS,
        method=method,
        unit="share above 0.5",
    )


def prefill_bound(f: Facts) -> Claim | None:
    """TTFT over half of end-to-end time. Not where every main request came whole in one read:
    its first token then waited for the generation behind it, and TTFT is not prefill's."""
    if all_delivered_whole(f.measured.main):
        return None
    ttft = f.measured.headline.ttft_s if f.measured.headline is not None else None
    if not (ttft and f.e2e_s and f.e2e_s > 0 and ttft / f.e2e_s > PREFILL_SHARE):
        return None
    share = ttft / f.e2e_s
    return Claim(
        id="prefill_bound",
        summary=f"Time to first token is {share:.0%} of end-to-end time ({ttft:.2f} of "
        f"{f.e2e_s:.2f} s): decode speed is not what users wait for.",
        evidence=[
            _ev("ttft p50", ttft, "s", f"client, {f.measured.main_label}"),
            _ev("e2e p50", f.e2e_s, "s", f"client, {f.measured.main_label}"),
        ],
        next=advice.prefill_bound(f.flavor),
        test=_prefill_test(f, share),
    )


# --- batching_interference ---------------------------------------------------------------------
# Per-request decode tps at the highest concurrency under 80% of concurrency 1's (C=1 is 1.25x
# or more faster), tested over requests.
BATCH_RATIO = BY_ID["batching_interference"].thresholds["per-request tps ratio"]


def batching_interference(f: Facts) -> Claim | None:
    if len(f.concurrency.points) < 2:
        return None
    pts = sorted(f.concurrency.points)
    c1, cmax = pts[0], pts[-1]
    if not (c1[1] > 0 and cmax[0] > c1[0]):
        return None
    ratio = cmax[1] / c1[1]
    return Claim(
        id="batching_interference",
        summary=f"At concurrency {cmax[0]} each request decodes at {ratio:.0%} of its "
        f"concurrency-{c1[0]} speed ({cmax[1]:.1f} vs {c1[1]:.1f} tok/s).",
        evidence=[
            _ev(f"per-request tps at C={c}", v, "tok/s", "concurrency_sweep") for c, v, _ in pts
        ],
        next=advice.batching_interference(f.flavor),
        test=sig.two_sample_log(
            f.concurrency.samples.get(c1[0], [c1[1]]),
            f.concurrency.samples.get(cmax[0], []),
            min_effect=1 / BATCH_RATIO - 1,
            method=f"per-request tps at C={c1[0]} / at C={cmax[0]}",
        ),
        factor=c1[1] / cmax[1],
    )


# --- draft_coverage -----------------------------------------------------------------------------
# Steps that drafted nothing (an n-gram drafter that found no match) commit one token at the
# full price of a step. Claimed when committing the drafted steps' mean on them too would make
# decode at least NO_DRAFT_COST faster; tested as the share of such steps against zero (binomial
# standard error over blocks of 8 steps, as steps are correlated), material from a share
# of NO_DRAFT_SHARE.
NO_DRAFT_SHARE = BY_ID["draft_coverage"].min_effect
NO_DRAFT_COST = BY_ID["draft_coverage"].thresholds["cost that matters (x)"]
COVERAGE_BLOCK = 8  # steps per independent unit (only counts are known, not the step order)


def draft_coverage(f: Facts) -> Claim | None:
    """The share of verify steps that drafted nothing and what they cost, as the tps the run
    would reach if those steps had committed the drafted steps' mean (step time held fixed:
    tps x L_drafted / L)."""
    h, head = f.measured.decomposition, f.measured.headline
    if head is None or head.share_counts is None or not head.share_counts[1] or h is None:
        return None
    drafted, steps = head.share_counts
    L, per, tps = h.mean_commit_len, head.mean_commit_len_per_drafted_step, h.decode_tps
    if not (L and per and tps):
        return None
    n, plain = round(steps), round(steps - drafted)
    if n <= 0 or plain <= 0:
        return None
    share = plain / n
    cost = per / L
    if cost < NO_DRAFT_COST:
        return None
    # steps come in correlated runs (a prompt region with or without n-gram matches): count
    # blocks of COVERAGE_BLOCK steps as the independent units, never fewer than 2
    units = max(2.0, n / COVERAGE_BLOCK)
    se = math.sqrt(max(share * (1 - share), 1e-12) / units)
    src = head.share_source or ""
    return Claim(
        id="draft_coverage",
        summary=f"{share:.0%} of verify steps drafted nothing ({plain} of {n}): each committed "
        f"one token for a full step. The drafted steps commit {per:.2f} tokens, all steps "
        f"{L:.2f}; with a draft on every step decode would reach ~{tps * cost:.1f} tok/s "
        f"instead of {tps:.1f} ({cost:.2f}x).",
        evidence=[
            _ev("steps that drafted nothing", plain, "steps", src),
            _ev("verify steps", n, "steps", src),
            _ev("share that drafted nothing", share, "", src),
            _ev("mean commit length, all steps", L, "tokens/step", src),
            _ev("mean commit length per drafted step", per, "tokens/step", src),
            *_cost_ev(cost, "per drafted step / all steps, step time held fixed"),
        ],
        next=advice.draft_coverage(f.flavor),
        test=sig.z_test(
            share,
            se,
            min_effect=NO_DRAFT_SHARE,
            unit="share of steps",
            method=f"z test of the no-draft share over {n} steps "
            f"({units:.0f} blocks of {COVERAGE_BLOCK} steps as units)",
        ),
        factor=cost,
    )


Rule = Callable[[Facts], Claim | None]
RULES: tuple[Rule, ...] = (
    client_limited,
    chunk_coalescing,
    acceptance_decay,
    draft_window,
    speculation_overhead,
    acceptance_low,
    step_time_drift,
    context_scaling,
    two_point_bias,
    prefill_bound,
    batching_interference,
    draft_coverage,
)


#: Claims about a drafter (the cards' `needs_speculation`): made only where the run's
#: speculation state is on (evidence that drafts exist), never against a plain server or one
#: whose state is unknown.
NEEDS_SPECULATION: frozenset[Rule] = frozenset(
    r for r in RULES if BY_ID[r.__name__].needs_speculation
)
#: Claims resting on the client's stamps of the stream: not made where the client was the limit.
TIMED_BY_CLIENT: frozenset[Rule] = frozenset(r for r in RULES if BY_ID[r.__name__].timed_by_client)


@dataclass(frozen=True)
class Decisions:
    findings: list[Finding]  # reported, ranked
    not_reported: list[str]  # claims tested and not reported, each with why
    tests: list[FindingTest]  # every claim's test and outcome


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


# A test's outcome where its interval reaches zero (FindingTest.outcome): nothing decided
INTERVAL_INCLUDES_ZERO = "interval includes zero effect"


def _outcome(t: sig.Test, q: float) -> str:
    if not math.isfinite(t.effect):
        return "not testable"
    if q > sig.ALPHA:
        return INTERVAL_INCLUDES_ZERO if t.interval_includes_zero else "not significant"
    return "reported" if t.material else "below minimum"


# The source of the evidence lines that restate a finding's test (method, effect, interval, p,
# q): the reports fold them away from the default view (--verbose, JSON and HTML keep them).
TEST_SOURCE = "significance test"


def _test_evidence(t: sig.Test, q: float, m: int) -> list[Evidence]:
    src = TEST_SOURCE
    return [
        _ev("test", t.method, "", src),
        _ev("effect", t.effect, t.unit, src),
        _ev("effect 95% CI low", t.ci[0], t.unit, src),
        _ev("effect 95% CI high", t.ci[1], t.unit, src),
        _ev("minimum effect that matters", t.min_effect, t.unit, src),
        _ev("p (one-sided)", t.p, "", src),
        _ev(f"q (Benjamini-Hochberg over {m} tested ids)", q, "", src),
    ]


def _why_not(c: Claim, q: float) -> str:
    t = c.test
    if not math.isfinite(t.effect):
        return f"no {c.id}: not testable here ({t.method})"
    fx = f"{t.effect:+.1%} (95% CI {t.ci[0]:+.1%}..{t.ci[1]:+.1%}; {t.method})"
    if q > sig.ALPHA:
        why = (
            "the interval includes zero effect"
            if t.interval_includes_zero
            else f"not significant after false-discovery control (q={q:.3f})"
        )
    else:
        why = f"below the {t.min_effect:.0%} that matters"
    return f"no {c.id}: {fx}: {why}"


def decide(f: Facts) -> Decisions:
    """Every rule's claim, its test, the false-discovery control over the tested ids, and the
    reported findings ranked (validity first, then confidence x |log cost|)."""
    rules = [r for r in RULES if _spec_on(f) or r not in NEEDS_SPECULATION]
    rejected: list[str] = []
    if f.client is not None and f.client.limits_step_time:
        rejected += [
            f"no {r.__name__}: not made, the client was the limit"
            for r in rules
            if r in TIMED_BY_CLIENT
        ]
        rules = [r for r in rules if r not in TIMED_BY_CLIENT]
    claims = [c for c in (rule(f) for rule in rules) if c is not None]
    tested = [c for c in claims if c.test is not None]
    qs = dict(zip((c.id for c in tested), sig.bh([c.test.p for c in tested]), strict=True))
    found: list[Finding] = []
    records: list[FindingTest] = []
    for c in claims:
        if c.test is not None:
            t = c.test
            records.append(
                FindingTest(
                    id=c.id,
                    method=t.method,
                    effect=_num(t.effect),
                    ci=[_num(t.ci[0]), _num(t.ci[1])],
                    p=t.p,
                    q=qs[c.id],
                    min_effect=t.min_effect,
                    unit=t.unit,
                    reported=_outcome(t, qs[c.id]) == "reported",
                    outcome=_outcome(t, qs[c.id]),
                )
            )
        if c.test is None:
            found.append(
                Finding(
                    id=c.id,
                    summary=c.summary,
                    evidence=c.evidence,
                    next=c.next,
                    confidence=c.check_confidence,
                    factor=c.factor,
                )
            )
            continue
        q = qs[c.id]
        if q <= sig.ALPHA and c.test.material:
            found.append(
                Finding(
                    id=c.id,
                    summary=c.summary,
                    next=c.next,
                    factor=c.factor,
                    evidence=c.evidence + _test_evidence(c.test, q, len(tested)),
                    confidence=sig.confidence(c.id, c.test, cap=c.cap),
                )
            )
        else:
            rejected.append(_why_not(c, q))
    return Decisions(rank(causes.assign(found, f, records), f), rejected, records)


def _importance(fd: Finding, f: Facts) -> float:
    cost = fd.factor
    if cost is None:
        share = (
            f.step_time.context_share
            if f.step_time.context_share is not None and f.step_time.context_share < 0.95
            else None
        )
        two_point = None
        if (
            f.two_point.estimate
            and f.measured.decomposition
            and f.measured.decomposition.decode_tps
        ):
            two_point = f.two_point.estimate.decode_tps / f.measured.decomposition.decode_tps
        cost = {
            "acceptance_decay": f.shape.decay_cost,
            "draft_window": f.shape.window_cost,
            "step_time_drift": f.step_time.drift_cost,
            "context_scaling": 1 / (1 - share) if share is not None else None,
            "two_point_bias": two_point,
        }.get(fd.id)
    magnitude = abs(math.log(cost)) if cost and cost > 0 else 0.05
    # the card's weight: a consequence of how it was measured (two_point_bias) or expected
    # behaviour (context_scaling) ranks below the faults that cause a gap
    return fd.confidence * max(magnitude * BY_ID[fd.id].weight, 0.05)


def rank(found: list[Finding], f: Facts) -> list[Finding]:
    """Validity checks (the cards' `validity`) first, except a client that fell behind where
    a finding shows what no client can produce (`_beyond_the_client`); then speculation that
    accepts nothing (switching it off or fixing the drafter comes before any shape of the
    steps); then the
    faults before what a healthy server does too (a card's `expected` cause: attention cost
    growing with the context at 38% of a 2.4 ms step outranked, by size, the drafter that lost
    its source 16 tokens in, on the H200); then by confidence x |log(cost)| x weight."""
    wasted = f.never_accepted is not None
    client_explains = not any(_beyond_the_client(x, f) for x in found)

    def key(x: Finding) -> tuple[bool, bool, bool, float]:
        pointless = wasted and x.id == "speculation_overhead"
        first = BY_ID[x.id].validity and (x.id != "client_limited" or client_explains)
        return (
            not first,
            not pointless,
            is_expected(x),
            -_importance(x, f),
        )

    return sorted(found, key=key)


def _beyond_the_client(x: Finding, f: Facts) -> bool:
    """A finding no lagging client can produce, which then outranks `client_limited` (still
    reported): the batching slowdown where the streams together came slower at the higher
    concurrency than one client read them at the lower one. A client that fell behind slows
    what it reads, never below what it read already (H200, graph-off-above=2: 849 tok/s read
    at C = 1, 444 at C = 4, 0.2 ms of lag on 1.1 ms steps: the client card hid graph_mode)."""
    if x.id != "batching_interference" or len(f.concurrency.points) < 2:
        return False
    pts = sorted(f.concurrency.points)
    (c1, tps1, _), (cmax, tpsmax, _) = pts[0], pts[-1]
    return cmax * tpsmax < c1 * tps1


def is_expected(x: Finding) -> bool:
    """The finding is what a healthy server does (its card's expected cause, named or still
    among the candidates with nothing else decided)."""
    expected = BY_ID[x.id].expected
    if expected is None:
        return False
    return x.cause == expected or (x.cause is None and expected in x.candidates)
