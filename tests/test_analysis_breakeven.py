"""Breakeven: the twin's continuous batching and its known crossovers; analysis.breakeven against
them (a few seeds: the bench prints the table over many); the JSON key in diagnose and compare,
the reports and the HTML curve."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from specscope.analysis.diagnosis.breakeven import breakeven, crossing
from specscope.analysis.diagnosis.diagnose import analyze
from specscope.analysis.headline.measure import measure
from specscope.backend import SamplingParams
from specscope.report.context import context_from_run
from specscope.report.contract import comparison_json
from specscope.report.figures import build_figures
from specscope.report.markdown import render_markdown
from specscope.store.compare import compare_analyses
from specscope.twin import scenario as tw
from specscope.twin.backend import TwinBackend
from specscope.validation.breakeven import CONTEXT, CONTEXT_RANGE, evaluate, simulated

BREAKEVEN_KEYS = {
    "concurrency",
    "concurrency_ci",
    "context",
    "context_ci",
    "reason",
    "recommendation",
    "factors",
}


def test_batch_of_one_draws_what_a_lone_request_draws() -> None:
    sc = tw.load_scenario("shared-drafter")
    lone = list(tw.simulate_request_steps(sc, 300, 64, seed=5))
    batched = tw.simulate_batch_steps(sc, 300, 64, [5])[0]
    assert [(s.commit_len, s.step_s) for s in lone] == [(s.commit_len, s.step_s) for s in batched]


def test_batch_step_time_is_linear_in_batch_times_verified_tokens() -> None:
    sc = tw.load_scenario("batch-verify-cost")
    st, v = sc.step, sc.acceptance.verified_tokens
    for b in (1, 4, 16):
        want = (
            st.s0
            + st.per_context_token * 600
            + st.per_verified_token * v
            + st.per_batch_request * (b - 1)
            + st.per_batch_verified_token * b * v
        )
        assert tw.expected_step_s(sc, 600, v, b, 0) == pytest.approx(want)
    # every request of one batch step shares that step's time
    steps = tw.simulate_batch_steps(sc, 512, 32, [1, 2, 3, 4])
    assert {r[0].step_s for r in steps} == {steps[0][0].step_s}


def test_batch_step_attends_over_every_requests_context() -> None:
    """A batch step's context cost is the sum of its requests' contexts (each reads its own KV
    cache), not the largest one's: without noise, four requests at 512 tokens cost the step
    4 x 512 context tokens."""
    sc = tw.load_scenario("context-verify-cost")
    quiet = sc.model_copy(update={"step": sc.step.model_copy(update={"noise_sigma": 0.0})})
    v = quiet.acceptance.verified_tokens
    first = [r[0] for r in tw.simulate_batch_steps(quiet, 512, 16, [1, 2, 3, 4])]
    assert {s.context_len for s in first} == {512}
    assert first[0].step_s == pytest.approx(tw.expected_step_s(quiet, 4 * 512, v, 4, 0))
    assert first[0].step_s > tw.expected_step_s(quiet, 512, v, 4, 0) + 0.01
    # the true rate charges a steady batch the same way
    assert tw.per_request_rate(quiet, 4, 512) == pytest.approx(
        tw.expected_commit_length(quiet, 0, 512, 4) / tw.expected_step_s(quiet, 2048, v, 4, 0)
    )


def test_acceptance_falls_with_batch_only_where_the_scenario_says() -> None:
    shared, healthy = tw.load_scenario("shared-drafter"), tw.load_scenario("healthy")
    assert tw.expected_commit_length(shared, 0, 576, 16) < 0.5 * tw.expected_commit_length(
        shared, 0, 576, 1
    )
    assert tw.expected_commit_length(healthy, 0, 576, 16) == tw.expected_commit_length(
        healthy, 0, 576, 1
    )
    # the defaults leave every existing scenario's step time as it was
    assert healthy.step.per_batch_verified_token == 0
    assert tw.expected_step_s(healthy, 600, 8, 4, 0) == pytest.approx(
        0.008 + 0.000007 * 600 + 0.0005 * 8 + 0.002 * 3
    )


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

    assert truth("batch-verify-cost") == pytest.approx(6.01, abs=0.01)
    assert truth("shared-drafter") == pytest.approx(10.29, abs=0.01)
    assert truth("expensive-tree") == pytest.approx(2.76, abs=0.01)
    assert truth("context-verify-cost") == pytest.approx(2.42, abs=0.01)
    assert truth("batch-headroom") is None and truth("batch-headroom", 32.0) is None


def test_true_context_crossover() -> None:
    """context-verify-cost: each verified token attends to the context, so the 8-token verify
    grows with context 8x as fast as plain decoding's step and loses past 1300 tokens; the
    batch-only scenarios have no context crossover in the sweep's range."""
    sc = tw.load_scenario("context-verify-cost")
    base = sc.variant("baseline")
    assert tw.breakeven_context(sc, base, *CONTEXT_RANGE) == pytest.approx(1300.0, abs=1.0)
    assert tw.per_request_rate(sc, 1, 256) > 1.5 * tw.per_request_rate(base, 1, 256)
    assert tw.per_request_rate(sc, 1, 4096) < 0.8 * tw.per_request_rate(base, 1, 4096)
    for name in ("batch-verify-cost", "shared-drafter", "batch-headroom"):
        other = tw.load_scenario(name)
        assert tw.breakeven_context(other, other.variant("baseline"), *CONTEXT_RANGE) is None


def test_breakeven_context_near_the_truth_and_inside_its_interval() -> None:
    """Two seeds: the context estimate within 20% of the truth and its 95% interval around the
    estimate; one of them holding the truth (the bench checks >= 90% over many seeds)."""
    outs = [evaluate("context-verify-cost", seed, resamples=80).axis("context") for seed in (0, 1)]
    for out in outs:
        assert out.truth is not None and out.within_20pct, (out.point, out.truth)
        assert out.ci is not None and out.ci[0] is not None and out.ci[1] is not None
        assert out.ci[0] < out.point < out.ci[1]
    assert any(o.covered for o in outs), [(o.ci, o.truth) for o in outs]


def test_a_dip_that_recovers_inside_the_range_is_no_breakeven() -> None:
    """The fitted gap may dip below zero and come back (noise at the low end): speculation pays
    again above the dip, so the breakeven is where it falls for good, or none."""
    x = np.linspace(1.0, 8.0, 71)
    recovers = np.where(x < 1.5, 0.1, np.where(x < 2.0, -0.1, 0.3))
    assert crossing(x, recovers, 4.0) is None
    falls_late = np.where(x < 1.5, 0.1, np.where(x < 2.0, -0.1, np.where(x < 3.0, 0.3, -0.2)))
    assert crossing(x, falls_late, 4.0) == pytest.approx(2.95, abs=0.1)
    beyond = 5.0 - x  # ahead at the range's end: the fall beyond it, to extrapolate
    assert crossing(x, beyond, 4.0) == pytest.approx(5.0, abs=0.01)


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
    cmp = comparison_json(compare_analyses(analyze(ref.run), plain, an))
    assert cmp["breakeven"] == an.breakeven
    md = render_markdown(context_from_run(obs.run, an))
    assert "## Breakeven" in md and "breakeven concurrency" in md
    figs = {p.spec.key: p.fig for p in build_figures(an)}
    fig = figs["breakeven"]
    assert fig is not None
    names = [t.name for t in fig.data]
    assert {"observed (fitted)", "baseline (fitted)", "observed 95% band"} <= set(names)


def test_without_sweeps_the_reason_says_what_is_missing() -> None:
    sc = tw.load_scenario("healthy")
    from specscope.validation import virtual

    def lone(name: tw.Scenario, seed: int) -> virtual.VirtualRun:
        return virtual.virtual_run(
            lambda p, n, s: tw.simulate_request(name, p, n, s),
            [virtual.PlanItem("full_generation", 512, 200)],
            seed=seed,
        )

    be = breakeven(measure(lone(sc, 1).run, None), measure(lone(sc, 2).run, None), resamples=20)
    assert be is not None
    js = be.to_json()
    assert js["concurrency"] is None and "needs a concurrency sweep" in js["concurrency_reason"]
    assert js["context"] is None and "needs a context sweep" in js["context_reason"]


@pytest.mark.parametrize("name", ["batch-verify-cost", "batch-headroom"])
def test_fewer_draft_tokens_predicted_against_the_true_rates(name: str) -> None:
    """At batch 16 the twin knows the rate with every draft count (a chain cut at depth k): the
    prediction picks a count whose true rate is within 5% of the best, its gain is within 20%
    of the truth's at that count, and the recommendation says so with each server's flag (also
    where speculation stays faster than plain decoding, batch-headroom)."""
    out = evaluate(name, 5, resamples=40)
    d = out.drafts()
    assert d is not None and 0 < d.best < len(d.true_rates) - 1
    assert d.right_choice, (d.best, d.true_rates)
    assert d.within_20pct, (d.gain, d.true_gain)
    assert d.gain_ci is not None and d.gain_ci[0] < d.gain < d.gain_ci[1]
    js = out.estimate.to_json()["fewer_drafts"]
    assert js["best_drafts"] == d.best and len(js["predicted_tps"]) == len(d.true_rates)
    rec = out.estimate.recommendation
    assert f"{d.best} draft tokens per step instead of 7" in rec
    assert "num_speculative_tokens" in rec and "--draft-max" in rec


def test_a_run_against_its_own_twin_supports_no_policy() -> None:
    """The same server as its own baseline (other random draws): the advantage at both ends of
    the sweep is level (within 5% of 1, or an interval holding 1), and no policy change is
    recommended."""
    sc = tw.load_scenario("expensive-tree")
    obs, ref = simulated(sc, 11, repeats=1), simulated(sc, 12, repeats=1)
    be = breakeven(measure(obs.run, None), measure(ref.run, None), seed=3, resamples=40)
    assert be is not None
    js = be.to_json()
    for end in ("low", "high"):
        lo, hi = js["advantage_ci"][f"at_concurrency_{end}"]
        point = js["advantage"][f"at_concurrency_{end}"]
        assert lo < point < hi and (lo < 1 < hi or abs(point - 1) < 0.05), (lo, point, hi)
        assert be.concurrency.side(end) == "level"
    assert "supports no policy change" in js["recommendation"] or (
        "not materially and significantly slower" in js["recommendation"]
    )
    assert "Speculation off above batch" not in js["recommendation"]
