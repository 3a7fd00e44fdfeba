"""The cause behind each finding (analysis/diagnosis/causes.py), on hand-built facts: a cause is
named only when the run's evidence rules every other candidate of the card out; otherwise the
finding says which candidates remain and the experiment that separates them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from specscope.analysis.diagnosis import causes, findings, verdict
from specscope.analysis.diagnosis.cards import BY_ID
from specscope.analysis.diagnosis.diagnose import analyze
from specscope.analysis.diagnosis.facts import (
    AcceptanceShape,
    Concurrency,
    DriftSeparation,
    Facts,
    MainSpan,
    StepTimeFacts,
    TwoPointFacts,
    drift_separation,
)
from specscope.analysis.headline.decompose import Decomposition
from specscope.analysis.headline.measure import StepTable
from specscope.analysis.result import Finding
from specscope.analysis.steps.speculation import SpeculationState
from specscope.twin import scenario as tw
from specscope.validation import virtual

ENGINE_CPU = {"page_size": 16, "backend": {"kv_alloc": "contiguous", "device": "cpu"}}
ENGINE_CUDA_EAGER = {"page_size": 16, "backend": {"device": "cuda", "fast_path": "EagerRunner"}}


def _facts(
    server_info=None,
    *,
    spec_on=True,
    commit=2.0,
    separation=None,
    context_factor=None,
    temperature=0.0,
) -> Facts:
    tokens = 4000.0
    sent = SimpleNamespace(spec=SimpleNamespace(temperature=temperature))
    measured = SimpleNamespace(
        decomposition=Decomposition(tokens=tokens, steps=tokens / commit, seconds=40.0),
        headline=SimpleNamespace(
            mean_commit_len=commit, mean_commit_len_per_drafted_step=None, drafted_step_share=None
        ),
        run=SimpleNamespace(info=SimpleNamespace(flavor="", server_info=server_info or {})),
        main=(sent, sent),
    )
    state = (
        SpeculationState(True, "hand-built: drafts") if spec_on else SpeculationState(False, "off")
    )
    return Facts(
        measured=measured,
        speculation=state,
        span=MainSpan(context=(256.0, 512.0)),
        step_time=StepTimeFacts(),
        shape=AcceptanceShape(),
        two_point=TwoPointFacts(context_factor=context_factor),
        concurrency=Concurrency(),
        drift_separation=separation,
    )


def _finding(fid: str, summary: str = "hand-built") -> Finding:
    return Finding(id=fid, summary=summary, confidence=0.9, next=f"{fid}'s own advice")


def _sep(share: float) -> DriftSeparation:
    early, late = 0.080, 0.120
    return DriftSeparation(early, late, early + share * (late - early), 512, 512, 1)


def _one(fid: str, f: Facts, *others: str) -> Finding:
    found = [_finding(fid), *(_finding(o) for o in others)]
    return next(x for x in causes.assign(found, f, []) if x.id == fid)


def test_a_drift_that_a_fresh_request_does_not_show_is_host_work_per_output_token():
    drift = _one("step_time_drift", _facts(ENGINE_CPU, spec_on=False, separation=_sep(0.1)))
    assert drift.cause == "host_per_token" and drift.candidates == ["host_per_token"]
    ruled = {r.id: r.reason for r in drift.ruled_out}
    assert set(ruled) == {"client", "kv_layout"}
    assert "fresh request" in ruled["kv_layout"] and "pages of 16 tokens" in ruled["kv_layout"]
    assert "incremental" in drift.next  # the cause's own next step, not the KV advice


def test_a_drift_that_a_fresh_request_shows_is_the_kv_layout():
    drift = _one("step_time_drift", _facts(ENGINE_CPU, spec_on=False, separation=_sep(0.9)))
    assert drift.cause == "kv_layout"
    assert {r.id for r in drift.ruled_out} == {"client", "host_per_token"}


def test_a_drift_without_the_separating_experiment_names_no_cause_and_asks_for_it():
    drift = _one("step_time_drift", _facts(ENGINE_CPU, spec_on=False, separation=None))
    assert drift.cause is None
    assert drift.candidates == ["host_per_token", "kv_layout"]
    assert drift.next.startswith("to tell host_per_token, kv_layout apart: ")
    assert BY_ID["step_time_drift"].separates in drift.next


def test_a_drift_the_experiment_read_halfway_names_no_cause_and_says_what_it_read():
    """Halfway between the sides the experiment does not decide: the next step says what it
    read and asks for more fresh requests, not for the experiment as if it had not run."""
    drift = _one("step_time_drift", _facts(ENGINE_CPU, spec_on=False, separation=_sep(0.5)))
    assert drift.cause is None
    assert drift.candidates == ["host_per_token", "kv_layout"]
    assert "showed 50% of the generation's growth" in drift.next
    assert "--repeat 3" in drift.next and "the fastest decides" in drift.next
    assert BY_ID["step_time_drift"].separates not in drift.next
    assert drift.next.endswith("step_time_drift's own advice")


@pytest.mark.parametrize(
    ("server_info", "kv_check"),
    [
        ({"page_size": 1}, "pages of 1 token(s) can scatter"),  # decode allocates them one by one
        ({}, "does not state its KV layout"),  # the twin, a server that says nothing of its KV
    ],
)
def test_a_host_side_drift_with_the_kv_layout_open_asks_for_the_checks_left(server_info, kv_check):
    """The separating experiment ran and pointed to the output generated: the next step is not
    that experiment again but the KV check the server's statement leaves, then the host path."""
    drift = _one("step_time_drift", _facts(server_info, spec_on=False, separation=_sep(0.1)))
    assert drift.cause is None and drift.candidates == ["host_per_token", "kv_layout"]
    assert kv_check in drift.next and "10% of the growth came back" in drift.next
    assert "re-reads the whole output" in drift.next  # then the host path
    assert BY_ID["step_time_drift"].separates not in drift.next
    assert verdict.next_step(drift) == drift.next


def test_drafts_never_accepted_on_cpu_are_speculation_overhead():
    f = _facts(ENGINE_CPU, commit=1.0)
    over = _one("speculation_overhead", f)
    assert over.cause == "speculation_overhead"
    assert {r.id for r in over.ruled_out} == {
        "graph_mode",
        "drafter_quality",
        "sampling_temperature",
    }


def test_on_cuda_without_a_graph_statement_graph_mode_stays_a_candidate():
    over = _one("speculation_overhead", _facts(ENGINE_CUDA_EAGER, commit=1.0))
    assert over.cause is None and over.candidates == ["speculation_overhead", "graph_mode"]


def test_drafts_sometimes_accepted_leave_the_drafter_in_question():
    over = _one("speculation_overhead", _facts(ENGINE_CPU, commit=1.3))
    assert over.cause is None and "drafter_quality" in over.candidates


def test_the_two_point_bias_follows_the_drift_it_comes_from():
    f = _facts(ENGINE_CPU, spec_on=False, separation=_sep(0.05), context_factor=1.02)
    found = causes.assign([_finding("step_time_drift"), _finding("two_point_bias")], f, [])
    bias = next(x for x in found if x.id == "two_point_bias")
    assert bias.cause == "host_per_token"
    assert {r.id for r in bias.ruled_out} == {
        "acceptance_position",
        "attention_context",
        "kv_layout",
    }


def test_coalescing_the_server_states_is_the_stream_interval():
    stated = _one("chunk_coalescing", _facts({"stream_interval": 4}))
    assert stated.cause == "stream_coalescing"
    unstated = _one("chunk_coalescing", _facts({}))
    assert unstated.cause is None and unstated.candidates == ["stream_coalescing", "client"]


@pytest.mark.parametrize("fid", list(BY_ID))
def test_candidates_and_ruled_out_split_the_cards_causes(fid):
    """Whatever the evidence, every cause on the card is a candidate or ruled out (never both,
    never one from outside the card), and a named cause is the only candidate left."""
    for f in (
        _facts(ENGINE_CPU, commit=1.0, separation=_sep(0.1), context_factor=1.0),
        _facts({}, spec_on=False),
    ):
        x = _one(fid, f, *(o for o in BY_ID if o != fid))
        card = [c.value for c in BY_ID[fid].causes]
        ruled = [r.id for r in x.ruled_out]
        assert sorted(x.candidates + ruled) == sorted(card)
        assert not set(x.candidates) & set(ruled)
        assert x.cause is None or x.candidates == [x.cause]


def test_speculation_that_accepts_nothing_ranks_before_a_larger_step_time_effect():
    f = _facts(ENGINE_CPU, commit=1.0)
    big_drift = Finding(id="step_time_drift", summary="", confidence=0.99, factor=2.0)
    over = Finding(id="speculation_overhead", summary="", confidence=0.99)
    assert next(x.id for x in findings.rank([big_drift, over], f)) == "speculation_overhead"
    f_some = _facts(ENGINE_CPU, commit=1.3)
    assert next(x.id for x in findings.rank([big_drift, over], f_some)) == "step_time_drift"


def _table(step_s, context, pos, rid) -> StepTable:
    n = len(step_s)
    return StepTable(np.ones(n), np.asarray(step_s), np.asarray(context), np.asarray(pos), rid)


def test_drift_separation_reads_the_fresh_request_at_the_reached_context():
    """A main generation from a 256-token prompt over 256 tokens whose steps grow 80 -> 120 ms,
    and a fresh request with a 512-token prompt stepping at 85 ms: 12.5% of the growth."""
    pos = np.arange(256.0)
    main = _table(0.080 + 0.040 * pos / 255, 256 + pos, pos, np.zeros(256, dtype=int))
    fpos = np.arange(64.0)
    fresh = _table(np.full(64, 0.085), 512 + fpos, fpos, np.ones(64, dtype=int))
    both = StepTable(
        *(
            np.concatenate([a, b])
            for a, b in zip(main.__dict__.values(), fresh.__dict__.values(), strict=True)
        )
    )
    sep = drift_separation(both, main)
    assert sep is not None and sep.reached_context == 511 and sep.fresh_prompt == 512
    assert sep.fresh_s == pytest.approx(0.085)
    assert sep.share == pytest.approx((0.085 - sep.early_s) / (sep.late_s - sep.early_s))
    assert 0.0 < sep.share < causes.HOST_SHARE
    # without a fresh request long enough, the experiment was not run
    short = _table(np.full(64, 0.085), 300 + fpos, fpos, np.ones(64, dtype=int))
    mixed = StepTable(
        *(
            np.concatenate([a, b])
            for a, b in zip(main.__dict__.values(), short.__dict__.values(), strict=True)
        )
    )
    assert drift_separation(mixed, main) is None


def _stack(*tables: StepTable) -> StepTable:
    return StepTable(
        *(np.concatenate(cols) for cols in zip(*(t.__dict__.values() for t in tables), strict=True))
    )


def test_drift_separation_pairs_the_fresh_requests_at_one_moment_of_the_load():
    """Host work growing 80 -> 120 ms over a 256-token generation; the fresh requests ran later,
    when the machine was 1.6x slower: the one at the reached context at 130 ms, the one at the
    generation's own prompt at 128 ms. Against the generation's first steps the load reads as
    context (share 1.25: device side, wrong); against the fresh request beside it, 5%: host."""
    pos = np.arange(256.0)
    main = _table(0.080 + 0.040 * pos / 255, 256 + pos, pos, np.zeros(256, dtype=int))
    fpos = np.arange(64.0)
    at_reached = _table(np.full(64, 0.130), 512 + fpos, fpos, np.ones(64, dtype=int))
    at_prompt = _table(np.full(64, 0.128), 256 + fpos, fpos, np.full(64, 2))
    sep = drift_separation(_stack(main, at_reached, at_prompt), main)
    assert sep is not None and sep.base_prompt == 256 and sep.base_s == pytest.approx(0.128)
    assert sep.share == pytest.approx((0.130 - 0.128) / (sep.late_s - sep.early_s))
    assert sep.share < causes.HOST_SHARE
    unpaired = drift_separation(_stack(main, at_reached), main)
    assert unpaired is not None and unpaired.base_s is None and unpaired.share > causes.DEVICE_SHARE


def test_drift_separation_reads_the_fastest_fresh_request_at_the_reached_context():
    """Two fresh requests at the reached context, one of them slowed 2x by a burst of load (the
    third CPU matrix's host-work #1: 88 and 171 ms a step, the pooled median anywhere between;
    the likeliest reading of a CI run that left the drift undecided): device-bound cost would
    slow both, so the faster one decides, host side."""
    pos = np.arange(256.0)
    main = _table(0.080 + 0.040 * pos / 255, 256 + pos, pos, np.zeros(256, dtype=int))
    fpos = np.arange(64.0)
    quiet = _table(np.full(64, 0.082), 512 + fpos, fpos, np.ones(64, dtype=int))
    burst = _table(np.full(64, 0.164), 512 + fpos, fpos, np.full(64, 2))
    at_prompt = _table(np.full(64, 0.081), 256 + fpos, fpos, np.full(64, 3))
    sep = drift_separation(_stack(main, quiet, burst, at_prompt), main)
    assert sep is not None and sep.fresh_requests == 2
    assert sep.fresh_s == pytest.approx(0.082)
    assert sep.share < causes.HOST_SHARE
    drift = _one("step_time_drift", _facts(ENGINE_CPU, spec_on=False, separation=sep))
    assert drift.cause == "host_per_token"
    assert "82.0 ms (the fastest)" in next(r.reason for r in drift.ruled_out if r.id == "kv_layout")
    # both slowed, as device-bound cost would: device side
    both = _stack(main, burst, _table(np.full(64, 0.170), 512 + fpos, fpos, np.full(64, 4)))
    slowed = drift_separation(_stack(both, at_prompt), main)
    assert slowed is not None and slowed.share > causes.DEVICE_SHARE
    # a fresh request with fewer steps than an edge needs says nothing
    stub = _table(np.full(4, 0.060), 512 + np.arange(4.0), np.arange(4.0), np.full(4, 5))
    assert drift_separation(_stack(main, burst, stub, at_prompt), main).fresh_s == 0.164


def _twin_drift_run(page_size: int, seed: int):
    """The healthy twin with a drift of 0.06 ms per output token (the seed story's size), the
    diagnose plan's requests (context sweep included), and the page size the server states."""
    healthy = tw.load_scenario("healthy")
    sc = healthy.model_copy(
        update={"step": healthy.step.model_copy(update={"drift_per_output_token": 6e-5})}
    )
    return virtual.virtual_run(
        lambda p, n, s: tw.simulate_request(sc, p, n, s),
        virtual.story_plan(),
        prefill=lambda p: tw.prefill_time(sc, p),
        seed=seed,
        server_info={"page_size": page_size},
    ).run


@pytest.mark.parametrize("seed", [3, 4])
def test_outside_our_engine_a_drift_with_16_token_pages_is_host_work(seed):
    """The twin's drift grows with the output generated and its fresh long-prompt requests do
    not show it: with pages that cannot scatter the cause is host work; with the story's
    one-token pages the KV layout stays a candidate."""
    drift = next(
        f for f in analyze(_twin_drift_run(16, seed)).findings if f.id == "step_time_drift"
    )
    assert drift.cause == "host_per_token", drift.ruled_out
    story = next(f for f in analyze(_twin_drift_run(1, seed)).findings if f.id == "step_time_drift")
    assert story.cause is None and story.candidates == ["host_per_token", "kv_layout"]


def test_a_cliff_on_a_drafter_the_server_says_has_no_window_is_the_text():
    """Our engine and SGLang state `speculative_draft_window_size: null` for a drafter that sees
    the whole context: a drop across prompt lengths is then the text, not a window."""
    windowless = {"speculative_draft_window_size": None, **ENGINE_CPU}
    cliff = _one("draft_window", _facts(windowless))
    assert cliff.cause == "drafter_quality"
    assert "no window" in cliff.ruled_out[0].reason
    assert "window" not in cliff.next.split(":")[0]  # not "raise the drafter's window"
    unstated = _one("draft_window", _facts(ENGINE_CPU))
    assert unstated.cause is None and unstated.candidates == ["draft_window", "drafter_quality"]
    stated = _one("draft_window", _facts({"speculative_draft_window_size": 1024, **ENGINE_CPU}))
    assert stated.cause == "draft_window"


# --- batching_interference: commit length and step time by concurrency ------------------------
GRAPHS_UP_TO_2 = {
    "page_size": 16,
    "backend": {
        "device": "cuda",
        "fast_path": "CUDA graphs up to batch 2, eager forward above",
        "graph_max_batch": 2,
    },
}


def _swept(server_info, *, spec_on, commit, step_s, tps) -> Facts:
    """Facts with a concurrency sweep at 1 and 4: commit length, step time and per-request tps
    at each level (lowest level first)."""
    import dataclasses

    points = tuple(zip((1, 4), tps, step_s, strict=True))
    conc = Concurrency(
        points, {c: [t] * 4 for c, t, _ in points}, dict(zip((1, 4), commit, strict=True))
    )
    return dataclasses.replace(_facts(server_info, spec_on=spec_on), concurrency=conc)


def test_a_step_cost_cliff_above_the_stated_graph_batch_is_graph_mode():
    """Plain decoding (one token a step at any batch), steps 8x dearer at concurrency 4 on a
    server whose graphs stop at batch 2: the graphs, acceptance and host work ruled out."""
    f = _swept(
        GRAPHS_UP_TO_2, spec_on=False, commit=(1.0, 1.0), step_s=(0.0014, 0.011), tps=(700, 90)
    )
    found = _one("batching_interference", f)
    assert found.cause == "graph_mode"
    assert {r.id for r in found.ruled_out} == {"acceptance_concurrency", "host_per_token"}


def test_graphs_that_cover_every_batch_sent_are_not_in_question():
    covered = {**GRAPHS_UP_TO_2, "backend": {**GRAPHS_UP_TO_2["backend"], "graph_max_batch": 8}}
    f = _swept(covered, spec_on=False, commit=(1.0, 1.0), step_s=(0.0014, 0.011), tps=(700, 90))
    found = _one("batching_interference", f)
    assert found.cause is None and "graph_mode" in {r.id for r in found.ruled_out}
    # without a sweep nothing ran above batch 2: the stated graphs hold for the whole run
    assert "graph_mode" in {
        r.id for r in _one("speculation_overhead", _facts(GRAPHS_UP_TO_2)).ruled_out
    }


def test_a_batch_that_commits_fewer_tokens_a_step_is_acceptance_concurrency():
    """2.5 -> 1.2 tokens a step while a step costs 20% more: the slowdown is in acceptance
    (80% of it), so the step's cost (host work, graphs) is ruled out, a drift or not."""
    f = _swept(ENGINE_CPU, spec_on=True, commit=(2.5, 1.2), step_s=(0.10, 0.12), tps=(25, 10))
    found = _one("batching_interference", f, "step_time_drift")
    assert found.cause == "acceptance_concurrency"
    assert "tokens a step commits" in next(
        r.reason for r in found.ruled_out if r.id == "host_per_token"
    )


@pytest.mark.parametrize("commit", [(2.5, 2.4), (2.5, 1.2)])
def test_a_batch_that_commits_as_much_is_not_acceptance(commit):
    """Commit length within 10% from 1 to 4: acceptance ruled out, the steps' own cost left
    (on CPU with a drift: host work). A fall of commit length that is a small share of a large
    step-cost growth leaves acceptance in question and rules no step cost out by itself."""
    f = _swept(ENGINE_CPU, spec_on=True, commit=commit, step_s=(0.05, 0.40), tps=(50, 5))
    found = _one("batching_interference", f, "step_time_drift")
    ruled = {r.id for r in found.ruled_out}
    assert ("acceptance_concurrency" in ruled) == (commit[1] > 2.0)
    assert "host_per_token" not in ruled
    assert found.cause == ("host_per_token" if commit[1] > 2.0 else None)


@pytest.mark.parametrize(
    ("commit", "step_s", "tps", "cause"),
    [
        # batch-accept on this CPU (draft-budget=4, live 2026-12-04): commit length's fall is 53%
        # of the slowdown, beside a batch of four's own cost
        ((2.80, 1.67), (0.1089, 0.1729), (25.7, 9.7), "acceptance_concurrency"),
        # clean-load, the same server without the fault: commit length holds, the CPU's batch
        # cost is left with no cause on the list (no graphs, no drift)
        ((2.79, 2.79), (0.1083, 0.1842), (26.2, 15.3), None),
    ],
)
def test_the_cpu_load_rows_sweeps(commit, step_s, tps, cause):
    f = _swept(ENGINE_CPU, spec_on=True, commit=commit, step_s=step_s, tps=tps)
    drift = () if cause is None else ("step_time_drift",)  # the fault's run had one, no cause
    found = _one("batching_interference", f, *drift)
    assert found.cause == cause
    assert found.candidates == ([cause] if cause else [])


def test_sampled_requests_leave_the_temperature_in_question():
    """At T = 1 a drafted token is kept only where the target's own sample matches it: a low
    commit length is the drafter's or the temperature's, and the next step is the greedy run
    (not the concurrency experiment: the requests ran alone)."""
    low = _one("acceptance_low", _facts(ENGINE_CPU, commit=1.37, temperature=1.0))
    assert low.cause is None
    assert low.candidates == ["drafter_quality", "sampling_temperature"]
    assert "greedy against the used temperature" in verdict.next_step(low)
    assert "concurrency" not in verdict.next_step(low)
    greedy = _one("acceptance_low", _facts(ENGINE_CPU, commit=1.37))
    assert greedy.cause == "drafter_quality"
    assert "greedy (temperature 0)" in next(
        r.reason for r in greedy.ruled_out if r.id == "sampling_temperature"
    )


def test_requests_of_unknown_temperature_keep_it_in_question():
    """A run without main requests (nothing sent by specscope's client) cannot rule it out."""
    import dataclasses

    f = _facts(ENGINE_CPU, commit=1.37)
    f = dataclasses.replace(f, measured=SimpleNamespace(**{**vars(f.measured), "main": ()}))
    assert "sampling_temperature" in _one("acceptance_low", f).candidates


@pytest.mark.parametrize(("levels", "alone"), [((1,), True), ((1, 4), False)])
def test_a_sweep_that_stays_at_one_request_in_flight_is_requests_run_alone(levels, alone):
    """`--concurrency 1` adds a sweep of one level: every request still ran alone."""
    import dataclasses

    points = tuple((c, 250.0 / c, 0.005 * c) for c in levels)
    conc = Concurrency(points, {c: [t] * 4 for c, t, _ in points}, {c: 1.4 for c in levels})
    f = dataclasses.replace(_facts(ENGINE_CPU, commit=1.37, temperature=1.0), concurrency=conc)
    ruled = {r.id for r in _one("acceptance_low", f).ruled_out}
    assert ("acceptance_concurrency" in ruled) == alone
