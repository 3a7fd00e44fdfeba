"""False findings and power: repeated virtual-time diagnoses of twin scenarios with realistic
noise, scored against the scenario's exact truth.

A case is a scenario (a null one, where only context scaling is true, or one with effects of
stated sizes), the plan `specscope diagnose` would run (`experiments.diagnosis_plan`, quick or
full, calibration request included), a seed and optionally a baseline run. `run_case` simulates
it through the twin's pure step functions (no sleeping), analyses it, and returns which ids were
reported, each claim's test, and the truth each id is judged against. Used by
bench/false_findings.py and tests/test_validation_power.py; scenarios are passed in already
loaded (no I/O here).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from specscope.analysis.diagnosis.diagnose import analyze
from specscope.analysis.diagnosis.findings import (
    CONTEXT_SHARE,
    LOW_COMMIT_ABSOLUTE,
    MIN_DECAY,
    MIN_PREFILL_EXCESS,
    MIN_WINDOW,
    PREFILL_SHARE,
    TWO_POINT_BIAS,
)
from specscope.analysis.fits.steptime import DRIFT_MIN_SHARE
from specscope.analysis.result import Analysis, FindingTest
from specscope.experiments import diagnosis_plan
from specscope.trace import tags
from specscope.twin import scenario as tw
from specscope.validation import virtual

# Realistic noise (twin options): content moves a request's acceptance by ~N(0, 0.35) on the
# logit scale and easy/hard passages by N(0, 0.15) over ~10 steps; step noise of 8% with lag-1
# correlation 0.3; one request in ten stalls 250 ms once; one step in 200 spikes 100 ms.
# (Stronger wander, N(0, 0.3) over 20 steps, makes the within-request tests' serial-correlation
# correction too small: their z spreads ~1.4x wider than it should.)
REALISTIC = {
    "acceptance": {"request_sigma": 0.35, "stretch_sigma": 0.15, "stretch_steps": 10.0},
    "step": {"noise_sigma": 0.08, "noise_rho": 0.3, "spike_prob": 0.005, "spike_s": 0.1},
    "faults": {"stall_prob": 0.1, "stall_s": 0.25},
}


def with_tables(sc: tw.Scenario, **tables: dict) -> tw.Scenario:
    """The scenario with some keys of its tables replaced."""
    return sc.model_copy(update={k: getattr(sc, k).model_copy(update=v) for k, v in tables.items()})


def realistic(sc: tw.Scenario) -> tw.Scenario:
    """The scenario with REALISTIC noise (step noise never lowered below the scenario's)."""
    tables = {k: dict(v) for k, v in REALISTIC.items()}
    tables["step"]["noise_sigma"] = max(sc.step.noise_sigma, tables["step"]["noise_sigma"])
    return with_tables(sc, **tables)


def diagnose_plan(prompt_tokens: int, max_tokens: int, *, quick: bool) -> list[virtual.PlanItem]:
    """What `specscope diagnose [--quick]` runs, as a virtual plan (calibration first)."""
    cal = diagnosis_plan.calibration_step(prompt_tokens, None)
    items = [virtual.PlanItem(cal.tag, cal.prompt_tokens, cal.max_tokens, 1)]
    for st in diagnosis_plan.build(prompt_tokens, max_tokens, quick=quick).steps:
        items.append(virtual.PlanItem(st.tag, st.prompt_tokens, st.max_tokens, st.requests))
    return items


@dataclass(frozen=True)
class PowerCase:
    name: str
    scenario: tw.Scenario
    prompt_tokens: int
    max_tokens: int
    seed: int
    quick: bool = True
    baseline: tw.Scenario | None = None  # a second run (another seed) passed as --baseline
    stated: tuple[str, ...] = ()  # the ids whose detection the case is meant to show


@dataclass
class Truth:
    """Per id: the true effect in the test's units (None: no truth for this id) and whether it
    is present at a size that matters."""

    effect: dict[str, float | None] = field(default_factory=dict)
    present: dict[str, bool] = field(default_factory=dict)


@dataclass
class PowerOutcome:
    case: PowerCase
    analysis: Analysis
    truth: Truth
    reported: dict[str, float]  # id -> confidence
    tests: dict[str, FindingTest]
    # intervals against the truth: name -> (low, high, true value)
    intervals: dict[str, tuple[float, float, float]] = field(default_factory=dict)


def _expected_path(sc: tw.Scenario, prompt: int, start: int, stop: int) -> tuple[float, float]:
    """(tokens, seconds) the scenario's mean behaviour gives from output position start to stop
    at this prompt (commit lengths and step times at their expected values; time-scaled)."""
    verified = sc.acceptance.verified_tokens
    pos, tok, sec = 0.0, 0.0, 0.0
    while pos < stop:
        k = tw.expected_commit_length(sc, int(pos), int(prompt + pos))
        s = tw.expected_step_s(sc, int(prompt + pos), verified, 1, int(pos))
        if pos >= start:
            tok, sec = tok + k, sec + s
        pos += k
    return tok, sec


def _context_part(sc: tw.Scenario, context: float) -> tuple[float, float]:
    """(context term, step time without drift) at this context, time-scaled."""
    st = sc.step
    rest = st.s0 + st.per_verified_token * sc.acceptance.verified_tokens
    return st.per_context_token * context * sc.time_scale, (
        rest + st.per_context_token * context
    ) * sc.time_scale


def truth_of(case: PowerCase) -> Truth:
    """The truth each finding id is judged against, from the scenario's mean behaviour."""
    sc, p, g = case.scenario, case.prompt_tokens, case.max_tokens
    tr = Truth()
    no_decay = with_tables(sc, acceptance={"decay_per_output_token": 0.0})
    l_start = tw.expected_commit_length(no_decay, 0, p)
    l_end = (
        tw.expected_commit_length(sc, g, p + g)
        / tw.expected_commit_length(no_decay, g, p + g)
        * l_start
    )
    drop = 1 - l_end / l_start if l_start > 0 else 0.0
    tr.effect["acceptance_decay"] = drop if sc.acceptance.decay_per_output_token > 0 else 0.0
    tr.present["acceptance_decay"] = drop >= MIN_DECAY and sc.acceptance.decay_per_output_token > 0
    acc = sc.acceptance
    crosses = acc.window > 0 and p + g > acc.window
    w_drop = 0.0
    if acc.window > 0:  # commit length just above the window over just below it
        w_drop = 1 - tw.expected_commit_length(
            no_decay, 0, acc.window + 1
        ) / tw.expected_commit_length(no_decay, 0, acc.window)
    tr.effect["draft_window"] = w_drop if crosses else 0.0
    tr.present["draft_window"] = crosses and w_drop >= MIN_WINDOW
    tok, sec = _expected_path(sc, p, 0, g)
    steps_full = 0.0
    pos = 0.0
    while pos < g:
        pos += tw.expected_commit_length(sc, int(pos), int(p + pos))
        steps_full += 1
    mean_step = sec / steps_full if steps_full else 0.0
    drift_share = (
        sc.step.drift_per_output_token * sc.time_scale * g / mean_step if mean_step else 0.0
    )
    tr.effect["step_time_drift"] = drift_share
    tr.present["step_time_drift"] = drift_share >= DRIFT_MIN_SHARE
    # the context term's share of the step the context explains (drift left out, as the fit does)
    ctx_term, no_drift_step = _context_part(sc, p + g / 2)
    ctx_share = ctx_term / no_drift_step if no_drift_step else 0.0
    tr.effect["context_scaling"] = ctx_share
    tr.present["context_scaling"] = ctx_share >= CONTEXT_SHARE
    tp = [
        s
        for s in diagnosis_plan.build(p, g, quick=case.quick).steps
        if s.experiment == tags.TWO_POINT
    ]
    if tp:
        n1, n2 = min(s.max_tokens for s in tp), max(s.max_tokens for s in tp)
        wt, ws = _expected_path(sc, p, n1, n2)
        _, s_tp = _context_part(sc, p + (n1 + n2) / 2)
        _, s_full = _context_part(sc, p + g / 2)
        bias = (wt / ws) / ((tok / sec) * (s_full / s_tp)) - 1 if ws and sec else 0.0
        tr.effect["two_point_bias"] = bias
        tr.present["two_point_bias"] = bias >= TWO_POINT_BIAS
    mean_commit = tok / steps_full if steps_full else 0.0
    tr.present["acceptance_low"] = case.baseline is None and 0 < mean_commit < LOW_COMMIT_ABSOLUTE
    tr.present["chunk_coalescing"] = sc.streaming.stream_interval > 1
    ttft = tw.prefill_time(sc, p) + tw.expected_step_s(sc, p, acc.verified_tokens, 1, 0)
    tr.present["prefill_bound"] = ttft / (ttft + sec) >= PREFILL_SHARE + MIN_PREFILL_EXCESS
    return tr


def run_case(case: PowerCase) -> PowerOutcome:
    """Simulate, diagnose, and set the result beside the truth."""
    plan = diagnose_plan(case.prompt_tokens, case.max_tokens, quick=case.quick)
    obs = virtual.scenario_run(
        case.scenario, plan, seed=case.seed, run_id=f"{case.name}-{case.seed}"
    )
    base = None
    if case.baseline is not None:
        base = virtual.scenario_run(
            case.baseline, plan, seed=case.seed + 7919, run_id=f"{case.name}-base-{case.seed}"
        )
    an = analyze(obs.run, baseline=base.run if base else None, seed=case.seed)
    truth = truth_of(case)
    tests = {t.id: t for t in an.finding_tests}
    out = PowerOutcome(case, an, truth, {f.id: f.confidence for f in an.findings}, tests)
    for fid in (
        "acceptance_decay",
        "draft_window",
        "step_time_drift",
        "context_scaling",
        "two_point_bias",
    ):
        t = tests.get(fid)
        true = truth.effect.get(fid)
        if t is None or true is None or t.ci[0] is None or t.ci[1] is None:
            continue
        if fid in ("acceptance_decay", "draft_window") and true != 0.0:
            continue  # the linear / step estimand is not the twin's curve: only the null is exact
        out.intervals[fid] = (t.ci[0], t.ci[1], true)
    at = an.attribution
    if base is not None and at is not None:
        tb, to = base.truth(), obs.truth()
        true_acc = (tb[0] / tb[1]) / (to[0] / to[1])
        true_st = (to[2] / to[1]) / (tb[2] / tb[1])
        for name, ci, true in (
            ("attribution.acceptance_factor", at.acceptance_factor_ci, true_acc),
            ("attribution.step_time_factor", at.step_time_factor_ci, true_st),
            ("attribution.tps_ratio", at.tps_ratio_ci, true_acc * true_st),
        ):
            if ci is not None and ci.low is not None and ci.high is not None:
                out.intervals[name] = (ci.low, ci.high, true)
    return out


def is_right(out: PowerOutcome, fid: str) -> bool:
    """A reported id is right when the truth has it at a size that matters."""
    return bool(out.truth.present.get(fid, False))


def null_cases(
    scenarios: dict[str, tw.Scenario],
    *,
    seeds: range,
    quick: bool = True,
    shape: tuple[int, int] = (2700, 1500),
) -> list[PowerCase]:
    """Servers with no effect but context scaling, with realistic noise: healthy as shipped, a
    weaker drafter (~3 tokens/step), and llama.cpp-style per-token events; every third case
    with a baseline run of the same server."""
    h = scenarios["healthy"]
    servers = {
        "null:healthy": realistic(h),
        "null:weaker-drafter": realistic(
            with_tables(h, acceptance={"depth_probs": [0.85, 0.75, 0.6, 0.5, 0.4]})
        ),
        "null:per-token-events": realistic(with_tables(h, streaming={"per_token_events": True})),
    }
    cases = []
    for i, (name, sc) in enumerate(servers.items()):
        for s in seeds:
            cases.append(
                PowerCase(
                    name,
                    sc,
                    *shape,
                    seed=s + 10_000 * i,
                    quick=quick,
                    baseline=sc if s % 3 == 2 else None,
                )
            )
    return cases


def effect_cases(
    scenarios: dict[str, tw.Scenario], *, seeds: range, quick: bool = True
) -> list[PowerCase]:
    """Scenarios with true effects of stated sizes (realistic noise):
    - seed-regression as shipped (decay to the 0.63 floor: commit length 5 -> ~2.9; drift 60 us
      per output token: ~+50% step time over 1500 tokens; the two-point window far above);
    - decay-35: healthy with acceptance decaying to a 0.8 floor by output position ~740
      (commit length ~36% lower at the end; a quick diagnosis finds ~29% in ~80-90% of runs and
      ~20% in about one run in ten: one long generation is all it has);
    - drift-20: healthy with step time growing 20% of the mean step over the generation;
    - draft-window as shipped (cliff at 2048 tokens, 45% lower acceptance), the user's
      generation 1500 -> 2700 crossing it."""
    h = scenarios["healthy"]
    mean_step = 0.036  # healthy's mean step over 2700 -> 4200 (s)
    return [
        c
        for s in seeds
        for c in (
            PowerCase(
                "effect:seed-regression",
                realistic(scenarios["seed-regression"]),
                2701,
                1500,
                seed=s,
                quick=quick,
                stated=("acceptance_decay", "step_time_drift", "two_point_bias"),
            ),
            PowerCase(
                "effect:decay-35",
                realistic(
                    with_tables(
                        h, acceptance={"decay_per_output_token": 0.0003, "decay_floor": 0.8}
                    )
                ),
                2700,
                1500,
                seed=s,
                quick=quick,
                stated=("acceptance_decay",),
            ),
            PowerCase(
                "effect:drift-20",
                realistic(with_tables(h, step={"drift_per_output_token": 0.2 * mean_step / 1500})),
                2700,
                1500,
                seed=s,
                quick=quick,
                stated=("step_time_drift",),
            ),
            PowerCase(
                "effect:draft-window",
                realistic(scenarios["draft-window"]),
                1500,
                1200,
                seed=s,
                quick=quick,
                stated=("draft_window",),
            ),
        )
    ]


def false_rate(outs: list[PowerOutcome], fid: str) -> float:
    """Share of runs that reported `fid` although the truth does not have it."""
    judged = [o for o in outs if not is_right(o, fid)]
    return sum(fid in o.reported for o in judged) / len(judged) if judged else 0.0


def reliability(
    outs: list[PowerOutcome],
    edges: tuple[float, ...] = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0001),
) -> list[tuple[float, float, int, float, float]]:
    """(bin low, bin high, findings, mean confidence, share right) per confidence bin, over
    every reported finding with a sampled test (validity checks excluded)."""
    pairs = [(c, is_right(o, fid)) for o in outs for fid, c in o.reported.items() if fid in o.tests]
    rows = []
    for lo, hi in itertools.pairwise(edges):
        sel = [(c, r) for c, r in pairs if lo <= c < hi]
        if sel:
            rows.append(
                (
                    lo,
                    min(hi, 1.0),
                    len(sel),
                    float(np.mean([c for c, _ in sel])),
                    float(np.mean([r for _, r in sel])),
                )
            )
    return rows


def _context_per_token(share: float, sc: tw.Scenario, context: float) -> float:
    """The per-context-token step cost that makes the context term `share` of the step at this
    context (drift left out, time scale 1)."""
    rest = sc.step.s0 + sc.step.per_verified_token * sc.acceptance.verified_tokens
    return share * rest / ((1 - share) * context)


def calibration_cases(
    scenarios: dict[str, tw.Scenario], *, seeds: range, quick: bool = True
) -> list[PowerCase]:
    """Effects on both sides of their minimum (realistic noise), where a finding can be wrong
    (true sizes, truth_of): decays from a 5% to a 36% lower commit length (minimum 10%),
    step-time drift from 4% to 22% of the mean step (10%), window cliffs from 7% to 47% lower
    commit length (10%), context shares from 8% to 30% (15%); two-point bias follows from them
    (0 to 52%, 15%). What confidence is calibrated on (bench/false_findings.py --calibration),
    with the null and effect cases: its share right per confidence holds for this mix of sizes."""
    h, w = scenarios["healthy"], scenarios["draft-window"]
    mean_step = 0.036  # healthy's mean step over 2700 -> 4200 (s)
    variants: list[tuple[str, tw.Scenario, int, int]] = []
    for floor in (0.98, 0.95, 0.93, 0.91, 0.89, 0.87, 0.84, 0.8):
        sc = with_tables(h, acceptance={"decay_per_output_token": 0.0003, "decay_floor": floor})
        variants.append((f"cal:decay-floor-{floor}", sc, 2700, 1500))
    for share in (0.04, 0.07, 0.09, 0.11, 0.13, 0.16, 0.25):
        sc = with_tables(h, step={"drift_per_output_token": share * mean_step / 1500})
        variants.append((f"cal:drift-{share}", sc, 2700, 1500))
    for pen in (0.97, 0.93, 0.9, 0.87, 0.83, 0.7):
        variants.append(
            (f"cal:window-{pen}", with_tables(w, acceptance={"window_penalty": pen}), 1500, 1200)
        )
    for share in (0.08, 0.12, 0.14, 0.16, 0.18, 0.22, 0.3):
        per = _context_per_token(share, h, 2700 + 750)
        sc = with_tables(h, step={"per_context_token": per})
        variants.append((f"cal:context-{share}", sc, 2700, 1500))
    return [
        PowerCase(name, realistic(sc), p, g, seed=s + 50_000 * i, quick=quick)
        for s in seeds
        for i, (name, sc, p, g) in enumerate(variants)
    ]
