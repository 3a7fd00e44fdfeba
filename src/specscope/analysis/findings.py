"""From measured facts to ranked findings (ARCHITECTURE §6), each with its evidence.

Every finding here is a test with a documented threshold; none is emitted without the numbers
that passed it. `factor` is the finding's multiplicative share of the baseline gap (when a
baseline exists): the acceptance family splits `acceptance_factor`, the step-time family splits
`step_time_factor`, so the factors of one family multiply back to the attribution exactly.
Without a baseline, each finding's cost to the observed run (how much faster it would be without
the effect) is given as evidence instead, and ranking uses it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specscope.analysis import advice
from specscope.analysis.acceptance import AcceptanceFit, Honeymoon, ServerAcceptance
from specscope.analysis.decompose import Decomposition, Split, SplitCI
from specscope.analysis.model import Evidence, Finding
from specscope.analysis.speculation import SpeculationState
from specscope.analysis.steptime import DRIFT_Z, DriftTest, StepTimeFit

# --- thresholds (and why) -------------------------------------------------------------------
# Without a baseline, a mean commit length under 2.0 tokens/step is "low": tree/block drafters
# (DDTree, DFlash, EAGLE) commit 3-6 on chat text; under 2 the drafter adds at most one token.
LOW_COMMIT_ABSOLUTE = 2.0
# With a baseline, acceptance the shape tests do not explain must be >= 10% below the baseline.
LOW_COMMIT_RELATIVE = 1.10
# ... and the baseline's commit length must be >= 5% above with 95% confidence (bootstrap lower
# bound of the acceptance factor): two single long generations differ by a few % by chance.
LOW_COMMIT_CI = 1.05
# Under 1.5 tokens/step, speculation wins only if a verify step costs < 1.5 plain steps, which a
# multi-token verify plus drafting rarely does: flagged as possible overhead without a baseline.
OVERHEAD_COMMIT = 1.5
# A plain-decoding baseline commits ~1 token per step.
PLAIN_BASELINE_COMMIT = 1.05
# A two-point estimate 15% above the full generation is beyond repeat-to-repeat spread (< 10%
# on a quiet service) and changes capacity planning.
TWO_POINT_BIAS = 0.15
# Context scaling is worth stating when the context term is >= 15% of the step time at the
# measured context and its slope is significant (t >= 3).
CONTEXT_SHARE = 0.15
CONTEXT_T = 3.0
# Prefill-bound when time to first token is more than half of end-to-end time.
PREFILL_SHARE = 0.5
# Batching interference when per-request decode tps at the highest concurrency is < 80% of C=1.
BATCH_RATIO = 0.8


def confidence(stat: float, threshold: float, *, cap: float = 0.95) -> float:
    """0.6 at the threshold, rising towards `cap` as the statistic grows past it."""
    excess = max(0.0, abs(stat) - threshold) / max(threshold, 1e-9)
    return round(min(cap, 0.6 + 0.35 * math.tanh(excess)), 3)


@dataclass
class TwoPoint:
    n1: int
    n2: int
    prompt_tokens: int | None
    decode_tps: float
    repeats: int
    spread: float  # relative spread of the per-repeat estimates (max-min)/median, 0 when 1


@dataclass
class Facts:
    """Everything findings need, gathered by diagnosis.analyze (all optional)."""

    main_label: str = "all requests"
    headline: Decomposition | None = None
    commit_len_source: str = ""
    steps_reliable: bool | None = None
    unreliable_reasons: list[str] = field(default_factory=list)
    ttft_s: float | None = None
    e2e_s: float | None = None
    main_prompt: float | None = None
    main_context: tuple[float, float] | None = None
    main_output_span: float = 0.0
    step_fit: StepTimeFit | None = None
    drift: DriftTest | None = None
    drift_cost: float | None = None  # mean step / mean step without the drift term
    context_share: float | None = None  # context term / expected step at the main context
    growth_along_generation: float | None = None  # confounded case: end/start step time - 1
    acc_fit: AcceptanceFit | None = None
    acceptance_source: str = ""  # which steps the decay / window search used
    decay_cost: float | None = None
    window_cost: float | None = None
    honeymoon: Honeymoon | None = None
    two_point: TwoPoint | None = None
    two_point_window_step_s: float | None = None
    two_point_context_factor: float | None = None  # expected step full / two-point (context only)
    baseline: Decomposition | None = None
    split: Split | None = None
    split_ci: SplitCI | None = None
    server: ServerAcceptance | None = None
    client_commit_len: float | None = None
    concurrency: list[tuple[int, float, float | None]] = field(default_factory=list)
    server_info: dict[str, Any] = field(default_factory=dict)
    flavor: str = ""  # RunInfo.flavor: picks the server's own flag names in `next` advice
    # on / off / unknown; off silences acceptance findings (there is no drafter to blame)
    speculation: SpeculationState | None = None
    baseline_speculation: SpeculationState | None = None


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


def _cost_ev(cost: float | None, source: str) -> list[Evidence]:
    if cost is None:
        return []
    return [_ev("throughput cost of this effect (x faster without it)", cost, "x", source)]


def _family_factors(f: Facts) -> dict[str, float | None]:
    """Per-finding shares of the baseline gap; each family multiplies to its attribution factor."""
    out: dict[str, float | None] = {}
    if f.split is None:
        return out
    decay = f.decay_cost or 1.0
    window = f.window_cost or 1.0
    out["acceptance_decay"] = decay
    out["draft_window"] = window
    out["acceptance_low"] = f.split.acceptance_factor / (decay * window)
    drift = f.drift_cost or 1.0
    out["step_time_drift"] = drift
    plain = (f.baseline.mean_commit_len or 0) <= PLAIN_BASELINE_COMMIT if f.baseline else False
    # against plain decoding the step-time gap is the cost of speculating, not of context
    out["context_scaling"] = None if plain else f.split.step_time_factor / drift
    out["speculation_overhead"] = f.split.tps_ratio
    return out


def build_findings(f: Facts) -> list[Finding]:
    """All findings whose tests pass, ranked: measurement validity first (chunk_coalescing),
    then by confidence x log(cost or factor)."""
    found: list[Finding] = []
    fam = _family_factors(f)
    src_steps = f"client steps, {f.main_label}"
    src_acc = f.acceptance_source or src_steps
    h = f.headline

    # chunk_coalescing -------------------------------------------------------------------------
    if f.steps_reliable is False:
        found.append(
            Finding(
                id="chunk_coalescing",
                summary="Streamed chunks merge several verify steps, so client-side step times and "
                "commit lengths are unreliable; commit length comes from "
                f"{f.commit_len_source or 'nowhere (no server telemetry)'}.",
                evidence=[_ev("reason", r, "", "client chunks") for r in f.unreliable_reasons],
                confidence=0.9,
                next=advice.chunk_coalescing(f.flavor),
            )
        )

    # acceptance_decay -------------------------------------------------------------------------
    a = f.acc_fit
    if a is not None and a.decay_present and a.decay is not None:
        d = a.decay
        where = (
            f"after output position ~{d.at:.0f}"
            if d.kind == "step" and d.at is not None
            else "along the generation"
        )
        ev = [
            _ev("mean commit length early", d.before, "tokens/step", src_acc),
            _ev("mean commit length late", d.after, "tokens/step", src_acc),
            _ev("relative drop", d.relative_drop, "", "acceptance model search (BIC)"),
            _ev("t statistic", d.t, "", "OLS on commit length"),
            _ev("shape", d.kind, "", "acceptance model search (BIC)"),
            *_cost_ev(f.decay_cost, "mean early / mean overall"),
        ]
        if f.honeymoon:
            hm = f.honeymoon
            ev.append(
                _ev(
                    f"first {hm.window_tokens} tokens overstate the long-generation commit length by",
                    hm.commit_overstatement,
                    "",
                    src_acc,
                )
            )
        found.append(
            Finding(
                id="acceptance_decay",
                summary=f"Commit length falls with output position: {d.before:.2f} -> {d.after:.2f} "
                f"tokens/step {where} ({d.relative_drop:.0%} drop); early tokens are easy.",
                evidence=ev,
                confidence=confidence(d.t, 4.0),
                factor=fam.get("acceptance_decay"),
                next="measure with the real workload's prompts and long generations (not a short "
                "window); improve or retrain the drafter on long free-form/reasoning text",
            )
        )

    # draft_window -----------------------------------------------------------------------------
    if a is not None and a.window_present and a.window is not None:
        w = a.window
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
            _ev("t statistic", w.t, "", "OLS on commit length"),
            *_cost_ev(f.window_cost, "commit length without the cliff / observed"),
        ]
        conf = confidence(w.t, 4.0) if a.separable else min(0.5, confidence(w.t, 4.0))
        found.append(
            Finding(
                id="draft_window",
                summary=f"Acceptance drops once the context exceeds ~{hi:.0f} tokens "
                f"({w.before:.2f} -> {w.after:.2f} tokens/step): the drafter's window.",
                evidence=ev,
                confidence=conf,
                factor=fam.get("draft_window"),
                next=advice.draft_window(f.flavor, hi),
            )
        )

    # speculation_overhead ---------------------------------------------------------------------
    plain_baseline = f.baseline is not None and (
        (f.baseline.mean_commit_len or 0) <= PLAIN_BASELINE_COMMIT
        or (f.baseline_speculation is not None and f.baseline_speculation.off)
    )
    # No drafter in this run: nothing to accept, so no acceptance finding and no speculation
    # overhead (a plain run slower than a plain baseline is not speculation's fault).
    spec_off = f.speculation is not None and f.speculation.off
    spec_on = f.speculation is not None and f.speculation.on is True
    L = h.mean_commit_len if h else None
    if not spec_off and plain_baseline and f.split is not None and f.split.tps_ratio > 1.05:
        found.append(
            Finding(
                id="speculation_overhead",
                summary=f"Speculation is slower than plain decoding here: "
                f"{h.decode_tps:.1f} vs {f.baseline.decode_tps:.1f} tok/s; each verify step "
                f"costs {f.split.step_time_factor:.2f}x a plain step but commits only {L:.2f} tokens.",
                evidence=[
                    _ev("decode tps with speculation", h.decode_tps, "tok/s", src_steps),
                    _ev(
                        "decode tps plain (baseline)",
                        f.baseline.decode_tps,
                        "tok/s",
                        "baseline run",
                    ),
                    _ev("mean commit length", L, "tokens/step", f.commit_len_source),
                    _ev("step time ratio spec/plain", f.split.step_time_factor, "x", "attribution"),
                ],
                confidence=0.9,
                factor=fam.get("speculation_overhead"),
                next=advice.speculation_overhead(f.flavor),
            )
        )
    elif L is not None and L < OVERHEAD_COMMIT and not plain_baseline and spec_on:
        found.append(
            Finding(
                id="speculation_overhead",
                summary=f"Only {L:.2f} tokens per verify step: speculation probably costs more than "
                "it saves (a verify step must cost < {:.2f} plain steps to break even).".format(L),
                evidence=[
                    _ev("mean commit length", L, "tokens/step", f.commit_len_source),
                    _ev("mean step time", h.mean_step_s if h else None, "s", src_steps),
                ],
                confidence=0.5,
                next="run the same prompt with speculation disabled and pass it as --baseline: "
                "plain decoding faster means speculation is pure overhead here",
            )
        )

    # acceptance_low ---------------------------------------------------------------------------
    if L is not None and not plain_baseline and not spec_off:
        residual = fam.get("acceptance_low")
        ci_low = f.split_ci.acceptance_factor[0] if f.split_ci is not None else None
        sure = ci_low is None or ci_low >= LOW_COMMIT_CI
        if residual is not None and residual >= LOW_COMMIT_RELATIVE and sure:
            found.append(
                Finding(
                    id="acceptance_low",
                    summary=f"Commit length {L:.2f} is below the baseline's "
                    f"{f.baseline.mean_commit_len:.2f} tokens/step beyond what its shape explains "
                    f"(x{residual:.2f}).",
                    evidence=[
                        _ev("mean commit length", L, "tokens/step", f.commit_len_source),
                        _ev(
                            "baseline mean commit length",
                            f.baseline.mean_commit_len,
                            "tokens/step",
                            "baseline run",
                        ),
                        _ev("acceptance factor", f.split.acceptance_factor, "x", "attribution"),
                        _ev("acceptance factor 95% CI low", ci_low, "x", "bootstrap"),
                    ],
                    confidence=0.8,
                    factor=residual,
                    next="check drafter version, temperature and prompt domain against the baseline; "
                    "compare the commit-length histograms (specscope compare)",
                )
            )
        elif f.baseline is None and L < LOW_COMMIT_ABSOLUTE:
            found.append(
                Finding(
                    id="acceptance_low",
                    summary=f"Mean commit length is {L:.2f} tokens/step: the drafter rarely gets more "
                    "than one draft accepted.",
                    evidence=[_ev("mean commit length", L, "tokens/step", f.commit_len_source)],
                    confidence=0.6,
                    next=advice.acceptance_low(f.flavor),
                )
            )

    # step_time_drift / context_scaling --------------------------------------------------------
    fit = f.step_fit
    if f.drift is not None and f.drift.present:
        dr = f.drift
        found.append(
            Finding(
                id="step_time_drift",
                summary=f"Step time grows with output position beyond what context explains: "
                f"+{dr.slope_s_per_token * 1e3 * 1000:.2f} ms per 1000 output tokens "
                f"(+{dr.share:.0%} of the mean step over {dr.span_tokens:.0f} tokens).",
                evidence=[
                    _ev(
                        "drift slope",
                        dr.slope_s_per_token,
                        "s/token",
                        "robust regression, steps of all requests",
                    ),
                    _ev("drift slope 95% CI low", dr.ci[0], "s/token", "robust regression"),
                    _ev("drift slope 95% CI high", dr.ci[1], "s/token", "robust regression"),
                    _ev(
                        "z",
                        dr.z,
                        "",
                        f"autocorrelation-inflated se (rho={fit.autocorr:.2f})" if fit else "",
                    ),
                    _ev("drift over the generation", dr.total_drift_s, "s", "slope x output span"),
                    _ev("per-step noise sd", dr.noise_sd, "s", "robust residual sd"),
                    _ev(
                        "context slope",
                        fit.per_context_token if fit else None,
                        "s/token",
                        "same regression",
                    ),
                    *_cost_ev(f.drift_cost, "mean step / mean step without drift"),
                ],
                confidence=confidence(dr.z, DRIFT_Z),
                factor=fam.get("step_time_drift"),
                next="stateful degradation (KV fragmentation, memory pressure): check page size / KV "
                "allocation (page_size=1 with tree acceptance scatters KV), restart-and-remeasure, "
                "and confirm with short prompt, long generation (specscope diagnose --prompt-tokens "
                "64 --max-tokens 2048)",
            )
        )
    if fit is not None and fit.identifiable is False and f.growth_along_generation is not None:
        g = f.growth_along_generation
        if g >= 0.25:
            found.append(
                Finding(
                    id="context_scaling",
                    summary=f"Step time grows {g:.0%} along the generation, but with one prompt length "
                    "context growth and output-length drift cannot be told apart.",
                    evidence=[
                        _ev("step-time growth start->end", g, "", src_steps),
                        _ev(
                            "slope along the generation",
                            fit.per_context_token,
                            "s/token",
                            "robust regression",
                        ),
                    ],
                    confidence=0.35,
                    factor=fam.get("context_scaling"),
                    next="short prompt, long generation (specscope diagnose --prompt-tokens 64 "
                    "--max-tokens 2048) separates output length from context; a context sweep gives "
                    "the attention slope",
                )
            )
    elif fit is not None and f.context_share is not None:
        se = fit.se.get("per_context_token", float("inf"))
        t = fit.per_context_token / se if se > 0 else 0.0
        if t >= CONTEXT_T and f.context_share >= CONTEXT_SHARE:
            found.append(
                Finding(
                    id="context_scaling",
                    summary=f"Step time grows with context as attention-bound decode should: "
                    f"{fit.per_context_token * 1e6:.2f} us per context token, "
                    f"{f.context_share:.0%} of the step at this context.",
                    evidence=[
                        _ev("s0", fit.s0, "s", "robust regression"),
                        _ev(
                            "per context token",
                            fit.per_context_token,
                            "s/token",
                            "robust regression",
                        ),
                        _ev("t statistic", t, "", "robust regression"),
                        _ev(
                            "share of step time at the measured context",
                            f.context_share,
                            "",
                            "model",
                        ),
                        _ev("r2", fit.r2, "", "robust regression"),
                    ],
                    confidence=confidence(t, CONTEXT_T, cap=0.9),
                    factor=fam.get("context_scaling"),
                    next="expected at concurrency 1; shorter prompts, prefix caching or a faster "
                    "attention kernel reduce it",
                )
            )

    # two_point_bias ---------------------------------------------------------------------------
    tp = f.two_point
    if (
        tp is not None
        and h is not None
        and h.decode_tps
        and f.main_label.startswith("full_generation")
    ):
        over = tp.decode_tps / h.decode_tps - 1
        ctx_f = f.two_point_context_factor or 1.0
        # the part a context difference explains is not a bias of the method: allowed for
        over_adj = tp.decode_tps / (h.decode_tps * ctx_f) - 1
        if over_adj >= TWO_POINT_BIAS:
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
            if f.honeymoon is not None:
                hm = f.honeymoon
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
            if f.two_point_window_step_s and h.mean_step_s:
                ev.append(
                    _ev(
                        "step time in the two-point window",
                        f.two_point_window_step_s,
                        "s",
                        "two_point:n2 steps",
                    )
                )
                ev.append(_ev("step time over the full generation", h.mean_step_s, "s", src_steps))
            conf = 0.9 if tp.repeats >= 2 and tp.spread < over_adj else 0.6
            ctx_note = (
                f" ({over_adj:.0%} beyond what the context difference explains)"
                if abs(ctx_f - 1) > 0.05
                else ""
            )
            found.append(
                Finding(
                    id="two_point_bias",
                    summary=f"The two-point window ({tp.n1}->{tp.n2} tokens) reads {tp.decode_tps:.1f} tok/s, "
                    f"{over:.0%} above the full generation's {h.decode_tps:.1f}{ctx_note}: a short window samples "
                    "the easy early tokens and the fresh KV cache.",
                    evidence=ev,
                    confidence=conf,
                    # a measurement bias, not a cause of the gap: no share of it (factor None)
                    next="measure with the real generation length (full_generation), or move N1 past the "
                    "warm-up region; report both numbers",
                )
            )

    # prefill_bound ----------------------------------------------------------------------------
    if f.ttft_s and f.e2e_s and f.e2e_s > 0 and f.ttft_s / f.e2e_s > PREFILL_SHARE:
        share = f.ttft_s / f.e2e_s
        found.append(
            Finding(
                id="prefill_bound",
                summary=f"Time to first token is {share:.0%} of end-to-end time ({f.ttft_s:.2f} of {f.e2e_s:.2f} s): "
                "decode speed is not what users wait for.",
                evidence=[
                    _ev("ttft p50", f.ttft_s, "s", f"client, {f.main_label}"),
                    _ev("e2e p50", f.e2e_s, "s", f"client, {f.main_label}"),
                ],
                confidence=0.9,
                next="prefix caching, chunked-prefill size, or shorter prompts; check the queue (#queue-req)",
            )
        )

    # batching_interference --------------------------------------------------------------------
    if len(f.concurrency) >= 2:
        pts = sorted(f.concurrency)
        c1 = pts[0]
        cmax = pts[-1]
        if c1[1] > 0 and cmax[0] > c1[0] and cmax[1] / c1[1] < BATCH_RATIO:
            ratio = cmax[1] / c1[1]
            found.append(
                Finding(
                    id="batching_interference",
                    summary=f"At concurrency {cmax[0]} each request decodes at {ratio:.0%} of its "
                    f"concurrency-{c1[0]} speed ({cmax[1]:.1f} vs {c1[1]:.1f} tok/s).",
                    evidence=[
                        _ev(f"per-request tps at C={c}", v, "tok/s", "concurrency_sweep")
                        for c, v, _ in pts
                    ],
                    confidence=0.8,
                    factor=c1[1] / cmax[1],
                    next="measure at the deployment's real concurrency; tune max running requests / "
                    "speculative settings per batch size (speculation pays less in large batches)",
                )
            )

    return rank(found, f)


def _importance(fd: Finding, f: Facts) -> float:
    cost = fd.factor
    if cost is None:
        share = f.context_share if f.context_share is not None and f.context_share < 0.95 else None
        two_point = None
        if f.two_point and f.headline and f.headline.decode_tps:
            two_point = f.two_point.decode_tps / f.headline.decode_tps
        cost = {
            "acceptance_decay": f.decay_cost,
            "draft_window": f.window_cost,
            "step_time_drift": f.drift_cost,
            "context_scaling": 1 / (1 - share) if share is not None else None,
            "two_point_bias": two_point,
        }.get(fd.id)
    magnitude = abs(math.log(cost)) if cost and cost > 0 else 0.05
    if fd.id == "two_point_bias":
        # a consequence of decay/drift in how it was measured, not a cause: ranked below causes
        magnitude *= 0.25
    if fd.id == "context_scaling":
        # expected behaviour of attention-bound decode, not a fault: ranked below faults
        magnitude *= 0.5
    return fd.confidence * max(magnitude, 0.05)


def rank(found: list[Finding], f: Facts) -> list[Finding]:
    """Validity (chunk_coalescing) first, then by confidence x |log(cost)|."""
    return sorted(found, key=lambda x: (x.id != "chunk_coalescing", -_importance(x, f)))


# --- draft_coverage -----------------------------------------------------------------------------
# Steps that drafted nothing (an n-gram drafter that found no match) commit one token at the
# full price of a step. Reported when the share of such steps is at least NO_DRAFT_SHARE with 95%
# confidence (lower bound of a Wilson interval over the steps) and committing the drafted steps'
# mean on them too would make decode at least NO_DRAFT_COST faster: both significant and material.
NO_DRAFT_SHARE = 0.10
NO_DRAFT_COST = 1.10


def draft_coverage(
    drafted_steps: float | None,
    steps: float | None,
    mean_commit_len: float | None,
    per_drafted_step: float | None,
    decode_tps: float | None,
    *,
    source: str = "",
    speculation: SpeculationState | None = None,
) -> list[Finding]:
    """The `draft_coverage` finding (a list: empty when it does not apply): the share of verify
    steps that drafted nothing and what they cost, as the tps the run would reach if those steps
    had committed the drafted steps' mean (step time held fixed: tps x L_drafted / L)."""
    from scipy.stats import binomtest

    if speculation is not None and speculation.off:
        return []
    if not (drafted_steps is not None and steps and mean_commit_len and per_drafted_step
            and decode_tps):
        return []
    n, plain = round(steps), round(steps - drafted_steps)
    if n <= 0 or plain <= 0:
        return []
    share = plain / n
    ci = binomtest(plain, n).proportion_ci(confidence_level=0.95, method="wilson")
    cost = per_drafted_step / mean_commit_len
    if ci.low < NO_DRAFT_SHARE or cost < NO_DRAFT_COST:
        return []
    return [
        Finding(
            id="draft_coverage",
            summary=f"{share:.0%} of verify steps drafted nothing ({plain} of {n}): each committed "
            f"one token for a full step. The drafted steps commit {per_drafted_step:.2f} tokens, "
            f"all steps {mean_commit_len:.2f}; with a draft on every step decode would reach "
            f"~{decode_tps * cost:.1f} tok/s instead of {decode_tps:.1f} ({cost:.2f}x).",
            evidence=[
                _ev("steps that drafted nothing", plain, "steps", source),
                _ev("verify steps", n, "steps", source),
                _ev("share that drafted nothing", share, "", source),
                _ev("share 95% interval low (Wilson)", float(ci.low), "", source),
                _ev("share 95% interval high (Wilson)", float(ci.high), "", source),
                _ev("mean commit length, all steps", mean_commit_len, "tokens/step", source),
                _ev("mean commit length per drafted step", per_drafted_step, "tokens/step", source),
                *_cost_ev(cost, "per drafted step / all steps, step time held fixed"),
            ],
            confidence=confidence(ci.low, NO_DRAFT_SHARE),
            next="the drafter finds nothing to propose on these steps (n-gram lookup without a "
            "match): a shorter minimum n-gram, a larger lookup window, or a model-based drafter "
            "(EAGLE, a draft model), which drafts on every step",
        )
    ]
