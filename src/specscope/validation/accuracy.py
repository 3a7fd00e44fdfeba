"""The virtual-time scenario suite: diagnose twin scenarios (and randomised variants) and score
the diagnosis against the exact truth.

For each case a twin scenario is simulated with the story's plan (full generation 2701 -> 1500,
context sweep, two-point pair) through the twin's pure step functions, turned into client traces
(`analysis.virtual`), analysed against a baseline run (the healthy scenario, or the scenario's
own no-speculation `[baseline]` variant), and compared with the truth: the realised acceptance
and step-time factors, and the finding that really dominates. Used by tests/test_analysis_twin*
and bench/diagnosis_accuracy.py. Scenarios are passed in already loaded (no I/O here).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specscope.analysis.diagnosis.diagnose import analyze
from specscope.analysis.result import Analysis
from specscope.twin import scenario as tw
from specscope.validation import virtual

# Findings that must never appear on a healthy server (the false-finding check).
HEALTHY_FORBIDDEN = {"acceptance_low", "acceptance_decay", "draft_window", "step_time_drift"}
# When two causes' true costs are within 10% of each other, either is a right top finding.
TIE = 1.10


@dataclass
class Case:
    name: str  # scenario name
    scenario: tw.Scenario
    baseline: tw.Scenario
    seed: int
    two_point: bool = True
    label: str = ""


@dataclass
class Outcome:
    case: Case
    analysis: Analysis
    true_acceptance_factor: float
    true_step_time_factor: float
    acceptance_error: float | None
    step_time_error: float | None
    expected_top: set[str]
    top: str | None
    top_right: bool
    false_findings: list[str] = field(default_factory=list)
    # per cause found (decay, window, drift): |estimated factor / true cost - 1|
    cause_errors: dict[str, float] = field(default_factory=dict)

    @property
    def attribution_error(self) -> float | None:
        errs = [e for e in (self.acceptance_error, self.step_time_error) if e is not None]
        return max(errs) if errs else None


def _simulator(sc: tw.Scenario) -> virtual.StepSimulator:
    return lambda p, n, seed: tw.simulate_request(sc, p, n, seed)


def _run(sc: tw.Scenario, seed: int, two_point: bool) -> virtual.VirtualRun:
    return virtual.virtual_run(
        _simulator(sc),
        virtual.story_plan(two_point=two_point),
        prefill=lambda p: tw.prefill_time(sc, p),
        seed=seed,
        stream_interval=sc.streaming.stream_interval,
        per_token_events=sc.streaming.per_token_events,
        run_id=f"{sc.name}-{seed}",
    )


def _true_costs(sc: tw.Scenario, vr: virtual.VirtualRun) -> dict[str, float]:
    """How much faster the full generation would be without each effect (expected values over
    the realised positions and contexts of the full-generation steps)."""
    req = next(r for r in vr.run.requests if r.spec.tag == "full_generation")
    prompt = req.spec.prompt_tokens or 0
    pos, out = [], 0
    for k, _ in vr.true_steps[req.index]:
        pos.append(out)
        out += k
    p = np.asarray(pos)
    ctx = prompt + p
    verified = sc.acceptance.verified_tokens

    def mean_commit(s: tw.Scenario) -> float:
        return float(
            np.mean(
                [tw.expected_commit_length(s, int(o), int(c)) for o, c in zip(p, ctx, strict=True)]
            )
        )

    def mean_step(s: tw.Scenario) -> float:
        return float(
            np.mean(
                [
                    tw.expected_step_s(s, int(c), verified, 1, int(o))
                    for o, c in zip(p, ctx, strict=True)
                ]
            )
        )

    acc_l = mean_commit(sc)
    st_s = mean_step(sc)
    no_decay = sc.model_copy(
        update={"acceptance": sc.acceptance.model_copy(update={"decay_per_output_token": 0.0})}
    )
    no_window = sc.model_copy(update={"acceptance": sc.acceptance.model_copy(update={"window": 0})})
    no_drift = sc.model_copy(
        update={"step": sc.step.model_copy(update={"drift_per_output_token": 0.0})}
    )
    return {
        "acceptance_decay": mean_commit(no_decay) / acc_l,
        "draft_window": mean_commit(no_window) / acc_l,
        "step_time_drift": st_s / mean_step(no_drift),
    }


def expected_top(case: Case, vr: virtual.VirtualRun) -> set[str]:
    """The finding(s) that truly dominate this case."""
    sc = case.scenario
    if sc.streaming.stream_interval > 1:
        return {"chunk_coalescing"}
    if case.name == "speculation-overhead":
        return {"speculation_overhead"}
    costs = {k: v for k, v in _true_costs(sc, vr).items() if v > 1.10}
    if not costs:
        return {"context_scaling", "(none)"}
    best = max(costs.values())
    return {k for k, v in costs.items() if v * TIE >= best}


def evaluate(case: Case) -> Outcome:
    obs = _run(case.scenario, case.seed, case.two_point)
    base = _run(case.baseline, case.seed + 7919, case.two_point)
    an = analyze(obs.run, baseline=base.run, seed=case.seed)
    tb, to = base.truth(), obs.truth()
    true_acc = (tb[0] / tb[1]) / (to[0] / to[1])
    true_st = (to[2] / to[1]) / (tb[2] / tb[1])
    at = an.attribution
    acc_err = abs(at.acceptance_factor / true_acc - 1) if at and at.acceptance_factor else None
    st_err = abs(at.step_time_factor / true_st - 1) if at and at.step_time_factor else None
    exp = expected_top(case, obs)
    causes: dict[str, float] = {}
    if case.scenario.streaming.stream_interval == 1 and case.name != "speculation-overhead":
        truth = _true_costs(case.scenario, obs)
        for f in an.findings:
            if f.id in truth and f.factor and truth[f.id] > 1.05:
                causes[f.id] = abs(f.factor / truth[f.id] - 1)
    top = an.findings[0].id if an.findings else None
    ids = {f.id for f in an.findings}
    false = sorted(ids & HEALTHY_FORBIDDEN) if case.name in ("healthy", "coalescing") else []
    return Outcome(
        case=case,
        analysis=an,
        true_acceptance_factor=true_acc,
        true_step_time_factor=true_st,
        acceptance_error=acc_err,
        step_time_error=st_err,
        expected_top=exp,
        top=top,
        top_right=(top or "(none)") in exp,
        false_findings=false,
        cause_errors=causes,
    )


def _upd(sc: tw.Scenario, **tables: dict) -> tw.Scenario:
    return sc.model_copy(update={k: getattr(sc, k).model_copy(update=v) for k, v in tables.items()})


def randomised_cases(
    scenarios: dict[str, tw.Scenario], *, per_scenario: int, seed: int = 0
) -> list[Case]:
    """Variants of each scenario: seeds, noise levels, drift/decay sizes, window sizes and
    penalties, stream intervals, verify costs; the first case of each is the scenario as shipped."""
    rng = np.random.default_rng(seed)
    healthy = scenarios["healthy"]
    cases: list[Case] = []
    for name, sc in sorted(scenarios.items()):
        for i in range(per_scenario):
            s = sc
            label = "as shipped"
            if i > 0:
                noise = float(rng.uniform(0.02, 0.15))
                s = _upd(s, step={"noise_sigma": noise})
                label = f"noise {noise:.2f}"
                if rng.random() < 0.3:  # rare long stalls (GC, scheduler): robustness
                    s = _upd(s, step={"spike_prob": 0.01, "spike_s": 0.25})
                    label += ", 1% spikes of 250 ms"
                if name != "coalescing" and rng.random() < 0.25:  # llama.cpp-style token events
                    s = _upd(s, streaming={"per_token_events": True})
                    label += ", per-token events"
                if name == "seed-regression":
                    fd, fa = float(rng.uniform(0.5, 1.5)), float(rng.uniform(0.5, 1.5))
                    s = _upd(
                        s,
                        step={"drift_per_output_token": sc.step.drift_per_output_token * fd},
                        acceptance={
                            "decay_per_output_token": sc.acceptance.decay_per_output_token * fa
                        },
                    )
                    label += f", drift x{fd:.2f}, decay x{fa:.2f}"
                elif name == "draft-window":
                    w = int(rng.choice([1536, 2048, 3072]))
                    pen = float(rng.uniform(0.45, 0.7))
                    s = _upd(s, acceptance={"window": w, "window_penalty": pen})
                    label += f", window {w}, penalty {pen:.2f}"
                elif name == "coalescing":
                    si = int(rng.choice([2, 4, 8]))
                    s = _upd(s, streaming={"stream_interval": si})
                    label += f", stream interval {si}"
                elif name == "speculation-overhead":
                    f = float(rng.uniform(0.8, 1.2))
                    s = _upd(s, step={"per_verified_token": sc.step.per_verified_token * f})
                    label += f", verify cost x{f:.2f}"
            base = sc.variant("baseline") if name == "speculation-overhead" else healthy
            cases.append(
                Case(
                    name=name,
                    scenario=s,
                    baseline=base,
                    seed=int(rng.integers(0, 2**31)),
                    two_point=bool(i % 3 != 2),
                    label=label,
                )
            )
    return cases
