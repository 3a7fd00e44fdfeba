"""Speculation off (no drafter) is stated, not blamed; comparisons keep their comparative
findings; `next` advice names the diagnosed server's own flags. Virtual-time twin runs (the
twin's pure step functions), the same as test_analysis_diagnosis."""

from __future__ import annotations

import pytest

from specscope.analysis.diagnosis.diagnose import analyze
from specscope.analysis.steps.speculation import declared, speculation_state
from specscope.telemetry.records import SpecRecord
from specscope.trace.model import ServerSpecFields
from specscope.twin import scenario as tw
from specscope.validation import virtual

ACCEPTANCE_IDS = {"acceptance_low", "speculation_overhead"}


@pytest.fixture(scope="module")
def overhead() -> tw.Scenario:
    return tw.load_scenario("speculation-overhead")


@pytest.fixture(scope="module")
def plain() -> tw.Scenario:
    sc = tw.load_scenario("speculation-overhead:baseline")
    assert sc.acceptance.num_draft_tokens == 0  # the variant really has no drafter
    return sc


def _run(sc: tw.Scenario, seed: int, *, flavor: str = "sglang", server_info: dict | None = None):
    vr = virtual.virtual_run(
        lambda p, n, s: tw.simulate_request(sc, p, n, s),
        virtual.story_plan(),
        prefill=lambda p: tw.prefill_time(sc, p),
        seed=seed,
    )
    vr.run.info.flavor = flavor
    vr.run.info.server_info = dict(server_info or {})
    return vr.run


def _ids(an) -> set[str]:
    return {f.id for f in an.findings}


def test_plain_server_gets_no_acceptance_finding_and_says_speculation_is_off(plain):
    an = analyze(_run(plain, 1))
    assert an.mean_commit_len == pytest.approx(1.0)
    assert not _ids(an) & ACCEPTANCE_IDS, _ids(an)
    assert any("speculation looks off" in n for n in an.notes), an.notes
    if not an.findings:
        assert "speculation looks off" in an.no_finding_reason


def test_plain_server_declared_off_by_its_info(plain):
    an = analyze(_run(plain, 2, server_info={"speculative_algorithm": None}))
    assert not _ids(an) & ACCEPTANCE_IDS
    assert any("speculative_algorithm=None" in n for n in an.notes), an.notes


def test_declared_drafter_with_every_draft_rejected_is_still_low_acceptance(plain):
    # Same one-token steps, but the server says it drafts 4 per step: the drafter is useless.
    an = analyze(
        _run(
            plain,
            3,
            server_info={"speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 5},
        )
    )
    assert _ids(an) >= ACCEPTANCE_IDS
    assert not any("speculation" in n and "off" in n for n in an.notes)


@pytest.mark.parametrize(
    ("flavor", "present", "absent"),
    [
        ("sglang", "--speculative-num-draft-tokens", "--spec-draft-n-max"),
        ("vllm", "--speculative-config", "--speculative-num-draft-tokens"),
        ("llamacpp", "--spec-draft-n-max", "--speculative-num-draft-tokens"),
        ("openai", "draft fewer tokens per step", "--spec"),
    ],
)
def test_next_advice_names_the_servers_own_flags(overhead, plain, flavor, present, absent):
    an = analyze(_run(overhead, 6, flavor=flavor), baseline=_run(plain, 7, flavor=flavor))
    f = next(f for f in an.findings if f.id == "speculation_overhead")
    assert present in f.next and absent not in f.next, f.next


def test_no_drafter_finding_while_the_state_is_unknown(overhead, plain, monkeypatch):
    """The same overhead run, once its evidence cannot tell whether the server drafts: no
    acceptance, decay, window, overhead or coverage claim is even tested, and the run says
    why nothing was found."""
    from specscope.analysis.diagnosis.findings import NEEDS_SPECULATION
    from specscope.analysis.headline import measure
    from specscope.analysis.steps.speculation import SpeculationState

    known = analyze(_run(overhead, 8), baseline=_run(plain, 9))
    assert _ids(known) & ACCEPTANCE_IDS, _ids(known)
    unknown = SpeculationState(None, "too few reliable steps and no server figure to tell")
    monkeypatch.setattr(measure, "state_of_requests", lambda *evidence: unknown)
    an = analyze(_run(overhead, 8), baseline=_run(plain, 9))
    gated = {r.__name__ for r in NEEDS_SPECULATION}
    assert an.speculation == "unknown"
    assert not _ids(an) & gated and not {t.id for t in an.finding_tests} & gated, _ids(an)
    if not an.findings:
        assert "unknown" in an.no_finding_reason or "tell" in an.no_finding_reason


def test_speculation_state_rules():
    assert declared({"speculative_num_draft_tokens": None}) == (
        False,
        "server info: speculative_num_draft_tokens=None",
    )
    assert declared({"num_draft_tokens": 4})[0] is True
    assert declared({"vllm_config": {"speculative_config": None}})[0] is False
    assert declared({"vllm_config": {"speculative_config": {"method": "ngram"}}})[0] is True
    assert declared({"model_path": "x"}) == (None, "")
    ones = [1.0] * 20
    assert speculation_state({}, ones, []).off
    assert speculation_state({}, ones[:3], []).on is None  # too few steps to tell
    assert speculation_state({}, [1.0] * 18 + [2.0, 3.0], []).on is True
    # one stray 2-token burst among many one-token steps is not a drafter
    assert speculation_state({}, [1.0] * 40 + [2.0], []).off
    # llama.cpp reports draft_n only when it drafted: its presence means on
    assert speculation_state({}, ones, [ServerSpecFields(proposed_drafts=30, accepted_drafts=0)]).on
    rec = SpecRecord(format="llamacpp_log", accept_rate=0.0, fields={"accepted": 0, "generated": 9})
    assert speculation_state({}, ones, [], [rec]).on is True
    zero = SpecRecord(
        format="prometheus",
        scope="run_delta",
        fields={"delta": {"drafts": 0.0, "accepted_tokens": 0.0}},
    )
    assert speculation_state({}, ones, [], [zero]).off


def test_server_figures_over_drafted_steps_are_labelled_and_yield_to_all_steps_ones():
    from specscope.analysis.fits.acceptance import from_telemetry

    logged = SpecRecord(
        format="llamacpp_log",
        scope="request",
        commit_len=6.25,
        fields={"accepted": 105, "generated": 120, "commit_len_basis": "drafted_steps"},
    )
    counters = SpecRecord(
        format="prometheus",
        scope="run_delta",
        commit_len=6.25,
        n_steps=20,
        fields={"delta": {"drafts": 20.0, "accepted_tokens": 105.0}},
    )
    timings = SpecRecord(
        format="llamacpp_timings",
        scope="request",
        commit_len=3.0,
        n_steps=50,
        fields={"commit_len_basis": "all_steps"},
    )
    only_drafted = from_telemetry([logged, counters])
    assert only_drafted.per_drafted_step and "per drafted step" in only_drafted.source
    mixed = from_telemetry([logged, counters, timings])
    assert not mixed.per_drafted_step and mixed.mean_commit_len == 3.0
    assert "per drafted step" not in mixed.source
