"""Breakeven: the twin's continuous batching and its known crossovers; analysis.breakeven against
them (a few seeds: the bench prints the table over many); the JSON key in diagnose and compare,
the reports and the HTML curve."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from specscope.analysis.breakeven import breakeven
from specscope.analysis.diagnosis import analyze
from specscope.analysis.measure import measure
from specscope.backend import SamplingParams
from specscope.report.context import context_from_run
from specscope.report.figures import build_figures
from specscope.report.markdown import render_markdown
from specscope.store.compare import compare_analyses
from specscope.twin import model as tw
from specscope.twin.backend import TwinBackend
from specscope.validation.breakeven import CONTEXT, evaluate, simulated

BREAKEVEN_KEYS = {"concurrency", "concurrency_ci", "context", "context_ci", "reason",
                  "recommendation", "factors"}


def test_batch_of_one_draws_what_a_lone_request_draws() -> None:
    sc = tw.load_scenario("shared-drafter")
    lone = list(tw.simulate_request_steps(sc, 300, 64, seed=5))
    batched = tw.simulate_batch_steps(sc, 300, 64, [5])[0]
    assert [(s.commit_len, s.step_s) for s in lone] == [(s.commit_len, s.step_s) for s in batched]


def test_batch_step_time_is_linear_in_batch_times_verified_tokens() -> None:
    sc = tw.load_scenario("batch-verify-cost")
    st, v = sc.step, sc.acceptance.verified_tokens
    for b in (1, 4, 16):
        want = (st.s0 + st.per_context_token * 600 + st.per_verified_token * v
                + st.per_batch_request * (b - 1) + st.per_batch_verified_token * b * v)
        assert tw.expected_step_s(sc, 600, v, b, 0) == pytest.approx(want)
    # every request of one batch step shares that step's time
    steps = tw.simulate_batch_steps(sc, 512, 32, [1, 2, 3, 4])
    assert {r[0].step_s for r in steps} == {steps[0][0].step_s}


def test_acceptance_falls_with_batch_only_where_the_scenario_says() -> None:
    shared, healthy = tw.load_scenario("shared-drafter"), tw.load_scenario("healthy")
    assert tw.expected_commit_length(shared, 0, 576, 16) < 0.5 * tw.expected_commit_length(
        shared, 0, 576, 1)
    assert tw.expected_commit_length(healthy, 0, 576, 16) == tw.expected_commit_length(
        healthy, 0, 576, 1)
    # the defaults leave every existing scenario's step time as it was
    assert healthy.step.per_batch_verified_token == 0
    assert tw.expected_step_s(healthy, 600, 8, 4, 0) == pytest.approx(
        0.008 + 0.000007 * 600 + 0.0005 * 8 + 0.002 * 3)


def test_live_twin_steps_the_batch_with_its_acceptance() -> None:
    sc = tw.load_scenario("shared-drafter").model_copy(update={"time_scale": 1e-4})
    backend = TwinBackend(sc)

    async def go() -> list[dict]:
        ids = [f"r{i}" for i in range(12)]
        for i, rid in enumerate(ids):
            await backend.prefill(rid, [1, 2, 3], SamplingParams(max_tokens=64, seed=i))
        for _ in range(6):
            await backend.step(ids)
        return [backend.truth(rid) for rid in ids]

    truths = asyncio.run(go())
    steps = [s for t in truths for s in t["steps"]]
    assert {s["batch_size"] for s in steps} == {12}
    mean_commit = float(np.mean([s["commit_len"] for s in steps]))
    assert mean_commit < 0.8 * tw.expected_commit_length(sc, 0, 3, 1)  # the shared drafter's cost


def test_true_crossovers_of_the_shipped_scenarios() -> None:
    def truth(name: str, high: float = 16.0) -> float | None:
        sc = tw.load_scenario(name)
        return tw.breakeven_batch(sc, sc.variant("baseline"), CONTEXT, high)

    assert truth("batch-verify-cost") == pytest.approx(6.09, abs=0.01)
    assert truth("shared-drafter") == pytest.approx(10.30, abs=0.01)
    assert truth("expensive-tree") == pytest.approx(2.95, abs=0.01)
    assert truth("batch-headroom") is None and truth("batch-headroom", 32.0) is None


@pytest.mark.parametrize("name", ["batch-verify-cost", "shared-drafter", "expensive-tree"])
def test_breakeven_concurrency_near_the_truth_and_inside_its_interval(name: str) -> None:
    """Three seeds each: every estimate within 20% of the truth, and the 95% interval holding
    it in at least two of three (the bench checks >= 90% over many seeds)."""
    outs = [evaluate(name, seed, resamples=80) for seed in (0, 1, 2)]
    for out in outs:
        assert out.truth is not None and out.estimate is not None
        assert out.within_20pct, (out.point, out.truth)
        low, high = out.estimate.concurrency.ci
        assert low is not None and high is not None and low < out.point < high
    assert sum(o.covered for o in outs) >= 2, [(o.estimate.concurrency.ci, o.truth) for o in outs]


def test_no_crossover_in_range_is_a_stated_result() -> None:
    out = evaluate("batch-headroom", 3, resamples=60)
    be = out.estimate
    assert be is not None and be.concurrency.point is None
    js = be.to_json()
    assert js["concurrency"] is None and "no concurrency crossover in [1, 16]" in js["reason"]
    assert be.concurrency.advantage_high > 1.1
    assert "Keep speculation on" in js["recommendation"]


def test_loss_factors_name_what_the_loss_is_made_of() -> None:
    verify = evaluate("batch-verify-cost", 4, resamples=40).estimate
    shared = evaluate("shared-drafter", 4, resamples=40).estimate
    assert verify is not None and shared is not None

    def share(be, name: str) -> float:
        return next(f["share_of_loss"] for f in be.concurrency.factors if f["name"] == name)

    assert share(verify, "verify_cost_with_batch") > 0.8
    assert share(shared, "acceptance_with_batch") > 0.5
    for be in (verify, shared):
        ratio = be.concurrency.advantage_low / be.concurrency.advantage_high
        product = math.prod(f["factor"] for f in be.concurrency.factors)
        assert product == pytest.approx(ratio, rel=1e-9)  # the split is exact
    rec = verify.recommendation
    assert "Speculation off above batch" in rec and "disable_by_batch_size" in rec
    assert "--speculative-num-draft-tokens" in rec and "--draft-max" in rec
    assert verify.predicted_gain is not None and verify.predicted_gain > 0


def test_diagnose_and_compare_json_carry_breakeven_and_the_reports_show_it() -> None:
    sc = tw.load_scenario("batch-verify-cost")
    obs, ref = simulated(sc, 6, repeats=1), simulated(sc.variant("baseline"), 7, repeats=1)
    plain = analyze(obs.run)
    assert plain.breakeven is None  # no baseline: nothing to cross
    an = analyze(obs.run, baseline=ref.run)
    assert an.breakeven is not None and set(an.breakeven) >= BREAKEVEN_KEYS
    assert an.breakeven["concurrency"] is not None
    cmp = compare_analyses(analyze(ref.run), plain, an).to_dict()
    assert cmp["breakeven"] == an.breakeven
    md = render_markdown(context_from_run(obs.run, an))
    assert "## Breakeven" in md and "breakeven concurrency" in md
    figs = dict((spec.key, fig) for spec, fig in build_figures(an))
    fig = figs["breakeven"]
    assert fig is not None
    names = [t.name for t in fig.data]
    assert {"observed (fitted)", "baseline (fitted)", "observed 95% band"} <= set(names)


def test_without_sweeps_the_reason_says_what_is_missing() -> None:
    sc = tw.load_scenario("healthy")
    from specscope.analysis import virtual

    def lone(name: tw.Scenario, seed: int) -> virtual.VirtualRun:
        return virtual.virtual_run(lambda p, n, s: tw.simulate_request(name, p, n, s),
                                   [virtual.PlanItem("full_generation", 512, 200)], seed=seed)

    be = breakeven(measure(lone(sc, 1).run, None), measure(lone(sc, 2).run, None), resamples=20)
    assert be is not None
    js = be.to_json()
    assert js["concurrency"] is None and "needs a concurrency sweep" in js["concurrency_reason"]
    assert js["context"] is None and "needs a context sweep" in js["context_reason"]
