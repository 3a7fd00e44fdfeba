"""A run cut short by Ctrl-C: the main generation's streamed part is measured (its steps are
whole steps at their real positions), a request that failed any other way is not, and a
diagnosis that could not test the acceptance shape never calls acceptance steady."""

from __future__ import annotations

from specscope.analysis.diagnosis.diagnose import analyze
from specscope.analysis.diagnosis.verdict import PARTIAL
from specscope.trace import tags
from specscope.trace.model import CANCELLED, ErrorInfo, Run
from specscope.twin import scenario as tw
from specscope.validation import power as pw
from specscope.validation import virtual
from support.reports import story_run


def _main_cut_after(run: Run, chunks: int, kind: str) -> Run:
    """The run as if its full generation had stopped after `chunks` chunks, for `kind`."""
    reqs = []
    for r in run.requests:
        if tags.split(r.spec.tag)[0] == tags.FULL_GENERATION:
            kept = r.chunks[:chunks]
            r = r.model_copy(
                update={
                    "chunks": kept,
                    "completion_tokens": None,
                    "tokens_received": sum(c.n_tokens for c in kept),
                    "t_end_ns": kept[-1].t_ns,
                    "error": ErrorInfo(kind=kind, message="cut"),
                    "server_spec": None,
                }
            )
        reqs.append(r)
    return run.model_copy(update={"requests": reqs})


def test_a_main_generation_cut_by_ctrl_c_is_measured_to_where_it_stopped():
    run = story_run("seed-regression", 3)
    full = next(r for r in run.requests if r.spec.tag == tags.FULL_GENERATION)
    cut = _main_cut_after(run, len(full.chunks) // 2, CANCELLED)
    a = analyze(cut)
    assert a.decode_tps is not None and a.mean_commit_len is not None
    assert any("cut short by Ctrl-C" in n for n in a.notes), a.notes
    assert not any("failed" in n for n in a.notes), a.notes  # it was measured, not dropped
    # the same request cut by the network is not measured: the headline has nothing else
    lost = analyze(_main_cut_after(run, len(full.chunks) // 2, "stream_truncated"))
    assert lost.decode_tps is None or lost.decode_tps != a.decode_tps
    assert any("failed (stream_truncated)" in n for n in lost.notes), lost.notes


def test_steady_acceptance_is_never_said_of_a_run_cut_short():
    # a clean server with step time flat in context: nothing found, acceptance read as steady
    flat = pw.with_tables(tw.load_scenario("healthy"), step={"per_context_token": 0.0})
    plan = virtual.story_plan(full_prompt=1024, full_tokens=400, sweep=(256, 1024), repeats=1)
    run = virtual.scenario_run(flat, plan, seed=1).run
    whole = analyze(run)
    assert not whole.findings and "acceptance is steady" in (whole.no_finding_reason or "")
    # the same run stopped by Ctrl-C a few steps into its full generation
    cut = _main_cut_after(run, 3, CANCELLED)
    cut = cut.model_copy(update={"info": cut.info.model_copy(update={"status": "partial"})})
    short = analyze(cut)
    said = " ".join([*short.verdict, short.no_finding_reason or "", *short.notes])
    assert "steady" not in said, said
    assert short.verdict[0] == PARTIAL


def test_acceptance_is_called_steady_only_where_the_decay_tests_interval_says_so():
    # three 1,500-token requests at T 0.7 on the CPU (docs/dflash.md, the decay study): the
    # decay test read -47% with an interval from -111% to +16%: not shown, not steady
    from specscope.analysis.diagnosis.diagnose import _decay_not_reported
    from specscope.analysis.result import FindingTest

    def decay(effect, lo, hi, outcome):
        return FindingTest(
            id="acceptance_decay", method="OLS", effect=effect, ci=[lo, hi], p=0.5, q=0.5,
            min_effect=0.10, reported=False, outcome=outcome,
        )  # fmt: skip

    wide = _decay_not_reported(decay(-0.473, -1.11, 0.165, "interval includes zero effect"))
    assert wide.startswith("no acceptance decay shown") and "steady" not in wide
    assert "-47.3%" in wide and "+16.5%" in wide
    tight = _decay_not_reported(decay(0.01, -0.04, 0.06, "interval includes zero effect"))
    assert tight.startswith("acceptance is steady") and "+-10%" in tight
    small = _decay_not_reported(decay(0.06, 0.03, 0.12, "below minimum"))
    assert small.endswith("below the 10% that matters")
