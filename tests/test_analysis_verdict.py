"""The verdict (analysis/diagnosis/verdict.py): the diagnosis in a few short sentences over
hand-built analyses, one per reading the issue names (a baseline or a reference window, nothing
wrong, speculation off, loops, a client/server disagreement, a partial run, a cause still open),
and over a real analysis of the story replayed on the twin."""

from __future__ import annotations

import pytest

from specscope.analysis.diagnosis.cards import MECHANISM, Cause
from specscope.analysis.diagnosis.findings import COST_LABEL
from specscope.analysis.diagnosis.verdict import (
    PARTIAL,
    Reference,
    next_step,
    verdict,
    with_partial,
)
from specscope.analysis.result import Analysis, Attribution, Evidence, Finding, FindingTest
from specscope.store.analyses import analyze_run
from support.reports import story_run


def _test(
    fid: str, reported: bool = True, effect: float = 0.4, ci: tuple[float, float] = (0.3, 0.5)
) -> FindingTest:
    """A claim's test: reported (effect 0.4, its interval clear of zero) or, with `reported`
    False, undecided (its interval reaching zero; small unless `effect` says otherwise)."""
    if not reported and effect == 0.4:
        effect, ci = 0.03, (-0.04, 0.10)
    return FindingTest(
        id=fid,
        method="m",
        effect=effect,
        ci=list(ci),
        p=1e-6 if reported else 0.2,
        q=1e-5 if reported else 0.4,
        min_effect=0.1,
        unit="fraction of the mean step" if fid == "step_time_drift" else "fraction",
        reported=reported,
        outcome="reported" if reported else "interval includes zero effect",
    )


def _decay(cause: str | None = "acceptance_position") -> Finding:
    return Finding(
        id="acceptance_decay",
        summary="Commit length falls with output position: 4.87 -> 2.70 tokens/step.",
        confidence=0.99,
        evidence=[Evidence(label=COST_LABEL, value=2.18, unit="x")],
        next="retrain the drafter on long text",
        cause=cause,
        candidates=[cause] if cause else [],
    )


def _drift_undecided() -> Finding:
    return Finding(
        id="step_time_drift",
        summary="Step time grows with output position.",
        confidence=0.99,
        factor=1.68,
        next="to tell host_per_token, kv_layout apart: a long sentence; the finding's advice",
        candidates=["host_per_token", "kv_layout"],
    )


def _analysis(**kw) -> Analysis:
    base = {
        "decode_tps": 32.7,
        "mean_commit_len": 2.9,
        "mean_step_s": 0.0887,
        "speculation": "on",
        "speculation_reason": "server telemetry reports drafts",
        "requests": 8,
    }
    return Analysis(**{**base, **kw})


WINDOW = Reference("the two-point window (tokens 32–128)", commit_len=5.0, step_s=0.044)


def test_the_rate_its_split_and_two_multiples_against_the_reference_window():
    a = _analysis(findings=[_decay()], finding_tests=[_test("acceptance_decay")])
    v = verdict(a, WINDOW)
    assert v[0] == "Decode runs at 32.7 tokens/s = 2.90 tokens per step / 88.7 ms per step."
    # 5.0 / 2.9 = 1.72x fewer tokens a step, 88.7 / 44 = 2.02x longer steps, 3.48x in all
    assert v[1] == (
        "Against the two-point window (tokens 32–128), 5.00 tokens per step in 44.0 ms steps: "
        "3.48× slower = 1.72× fewer tokens per step × 2.02× longer steps."
    )
    assert v[2].startswith("Top cause: acceptance_position, drafts accepted less")
    assert "acceptance_decay, cost 2.18×" in v[2]
    assert v[3] == "Next: retrain the drafter on long text."
    assert len(v) == 4 and PARTIAL not in v


def test_the_baseline_split_is_the_attribution_and_wins_over_any_window():
    at = Attribution(tps_ratio=4.2, acceptance_factor=1.72, step_time_factor=2.44)
    a = _analysis(attribution=at, findings=[_decay()], finding_tests=[_test("acceptance_decay")])
    v = verdict(a, Reference("the baseline", 5.0, 0.036))
    assert v[1] == (
        "Against the baseline: 4.20× slower = 1.72× fewer tokens per step × 2.44× longer steps."
    )
    faster = Attribution(tps_ratio=0.5, acceptance_factor=0.8, step_time_factor=0.625)
    v = verdict(_analysis(attribution=faster), None)
    assert v[1] == (
        "Against the baseline: 2.00× faster = 1.25× more tokens per step × 1.60× shorter steps."
    )


def test_without_a_reference_no_multiples_are_made_up():
    v = verdict(_analysis(findings=[_decay()]), None)
    assert not any(s.startswith("Against") for s in v)
    assert v[1].startswith("Top cause:")


def test_a_healthy_server_reads_nothing_wrong_in_words():
    a = _analysis(
        finding_tests=[_test("step_time_drift", False), _test("two_point_bias", False)],
        no_finding_reason="decode 32.7 tok/s = ...",
    )
    v = verdict(a, WINDOW)
    assert v[-2] == (
        "Nothing wrong: none of the 2 effects tested is both real and large enough to matter."
    )
    assert v[-1].startswith("Next: nothing to fix; keep this run as the baseline")
    # an effect as large as matters, its interval too wide to decide: not ruled out
    noisy = _test("step_time_drift", False, effect=1.25, ci=(-1.95, 4.45))
    small = _test("two_point_bias", False, effect=0.144, ci=(-0.22, 0.67))
    v = verdict(_analysis(finding_tests=[small, noisy]), WINDOW)
    assert v[-2] == (
        "Nothing shown wrong, but not ruled out: step_time_drift (step time grows with output "
        "position beyond what context explains) read +125% of the mean step (95% CI "
        "-195%..+445%), as large as the 10% that matters, with an interval too wide to decide."
    )
    assert v[-1] == (
        "Next: measure again with more repeats of the full generation (--precision 0.05) or on "
        "a quieter machine, to decide step_time_drift."
    )
    untested = verdict(_analysis(no_finding_reason="one prompt length."), None)
    assert untested[-1] == (
        "Nothing found wrong, but nothing could be tested either: one prompt length."
    )


def test_only_what_a_healthy_server_does_reads_nothing_wrong_with_what_could_hide():
    scaling = Finding(
        id="context_scaling",
        summary="Step time grows with context as attention-bound decode should.",
        confidence=0.99,
        factor=1.4,
        next="to tell attention_context and kv_layout apart, a context sweep",
        candidates=["attention_context", "kv_layout"],
    )
    v = verdict(_analysis(findings=[scaling], finding_tests=[_test("context_scaling")]), WINDOW)
    assert v[-2].startswith("Nothing wrong: what was found is how a healthy server behaves")
    assert "(context_scaling, factor 1.40×)" in v[-2]
    assert v[-1].startswith("Next: nothing to fix") and "kv_layout would look the same" in v[-1]
    assert not any(line.startswith("Top ") for line in v)
    # another effect as large as matters left undecided: not ruled out, said after what was
    # found
    noisy = _test("step_time_drift", False, effect=0.5, ci=(-0.2, 1.2))
    a = _analysis(findings=[scaling], finding_tests=[_test("context_scaling"), noisy])
    v = verdict(a, WINDOW)
    assert v[-3].startswith("What was found is how a healthy server behaves")
    assert v[-2].startswith("Nothing shown wrong, but not ruled out: step_time_drift")
    assert "read +50% of the mean step (95% CI -20%..+120%)" in v[-2]
    assert v[-1].endswith("to decide step_time_drift.")
    # named as the expected cause: nothing left to rule out
    named = scaling.model_copy(update={"cause": "attention_context", "candidates": []})
    v = verdict(_analysis(findings=[named], finding_tests=[_test("context_scaling")]), WINDOW)
    assert v[-1].endswith("with --baseline.")
    # beside a fault, the fault is the verdict's
    both = _analysis(findings=[_decay(), scaling], finding_tests=[_test("acceptance_decay")])
    assert verdict(both, WINDOW)[-2].startswith("Top cause: acceptance_position")


def test_speculation_off_is_said_and_loops_then_do_not_change_the_reading():
    loops = {"dominant": True, "note": "2 of 2 requests end in repetition loops (x): easy"}
    reason = (
        "speculation is off (server info: speculative_algorithm=None); every step commits one token"
    )
    a = _analysis(speculation="off", speculation_reason=reason, headline_loops=loops)
    v = verdict(a, WINDOW)
    assert (
        "Speculation is off (server info: speculative_algorithm=None); every step commits one "
        "token, so the rate is the step time alone." in v
    )
    assert not any("loops" in s for s in v)  # plain decoding drafts nothing, loops or not
    unknown = verdict(_analysis(speculation="unknown", speculation_reason="too few steps"), None)
    assert (
        "Whether the server drafts is unknown (too few steps): no drafter finding was tested."
        in (unknown)
    )


def test_loops_that_dominate_a_drafting_run_are_said():
    note = "11 of 16 requests end in repetition loops (the model kept generating): easy"
    a = _analysis(headline_loops={"dominant": True, "note": note}, findings=[_decay()])
    assert f"Repetition loops: {note}." in verdict(a, WINDOW)
    a.headline_loops = {"dominant": False, "note": None}
    assert not any("Repetition" in s for s in verdict(a, WINDOW))


def test_a_client_server_disagreement_is_said_once():
    said = "client steps say 2.10 tokens/step, server per-step records 3.00: chunks may merge"
    v = verdict(_analysis(findings=[_decay()]), WINDOW, [said, "another"])
    assert f"Client and server disagree: {said}." in v
    assert not any("another" in s for s in v)


def test_a_stream_slower_than_its_engine_is_said_when_it_changes_the_step_time():
    """vLLM's engine stepping at 42.9 ms while its stream delivered one every 46.6 ms is an 8.6%
    lag: noted in the headline, not the verdict; from 10% on the step time read is the
    delivery's and the verdict says so."""
    small = _analysis(server_step_s=0.0429, delivery_lag_share=0.086, findings=[_decay()])
    assert not any("Delivery" in s for s in verdict(small, WINDOW))
    big = _analysis(server_step_s=0.0429, delivery_lag_share=0.25, findings=[_decay()])
    [said] = [s for s in verdict(big, WINDOW) if s.startswith("Delivery is the limit")]
    assert "25% slower" in said and "42.9 ms a step at the engine" in said


def test_a_partial_run_is_said_first_and_follows_the_status():
    v = verdict(_analysis(partial=True, findings=[_decay()]), WINDOW)
    assert v[0] == PARTIAL
    assert with_partial(v, False) == v[1:]
    assert with_partial(v[1:], True) == v  # added once, first
    assert with_partial(v, True) == v
    nothing = verdict(Analysis(partial=True, no_finding_reason="no successful request"))
    assert nothing == [PARTIAL, "Nothing to diagnose: no successful request."]


def test_an_open_cause_names_its_candidates_and_the_experiment_that_separates_them():
    a = _analysis(findings=[_drift_undecided()], finding_tests=[_test("step_time_drift")])
    v = verdict(a, WINDOW)
    assert v[-2] == (
        "Top finding: step time grows with output position beyond what context explains "
        "(step_time_drift, factor 1.68×); its cause is host_per_token or kv_layout, not yet "
        "told apart."
    )
    assert v[-1].startswith("Next: to tell host_per_token and kv_layout apart, a fresh request")
    # the finding's own `next` is longer: the verdict and the folded view give the one step
    assert next_step(_drift_undecided()) == v[-1].removeprefix("Next: ").removesuffix(".")


def test_every_cause_has_its_mechanism_in_words():
    assert set(MECHANISM) == set(Cause)
    assert all(MECHANISM[c] and not MECHANISM[c].endswith(".") for c in Cause)


@pytest.fixture(scope="module")
def story():
    base, obs = story_run("healthy", 1), story_run("seed-regression", 2)
    return analyze_run(obs), analyze_run(obs, baseline=base)


def test_the_story_replayed_gets_its_verdict_from_the_analysis(story):
    alone, against = story
    assert (
        alone.verdict[0].startswith("Decode runs at ") and " tokens per step / " in alone.verdict[0]
    )
    # without a baseline the reference is the two-point window the plan ran
    assert alone.verdict[1].startswith("Against the two-point window (tokens ")
    assert any(s.startswith("Next: ") for s in alone.verdict)
    assert against.verdict[1].startswith("Against the baseline: ")
    at = against.attribution
    assert f"{at.acceptance_factor:.2f}×" in against.verdict[1] or (
        f"{1 / at.acceptance_factor:.2f}×" in against.verdict[1]
    )
    # the verdict lands in analysis.json (the model's dump)
    assert against.model_dump(mode="json")["verdict"] == against.verdict
