"""The diagnosis entry point: `analyze(run, baseline=, telemetry=) -> Analysis` (comparisons of
two runs: store.compare).

The reasoning of the story (shared/seed/), as code:
1. headline numbers from the user's real shape (the full_generation requests when present):
   analysis.measure and analysis.headline;
2. tps = commit length / step time, and versus a baseline the exact acceptance x step-time split;
3. step time against context with steps of every request (different prompt lengths separate the
   context effect from output-length drift);
4. commit length against output position and context (honeymoon decay vs the drafter's window);
5. the two-point window against the full generation (the short window's blind spot);
6. findings with evidence, ranked.
Steps 2-5 are analysis.facts (small functions returning frozen facts), the plots
analysis.series. Partial runs and runs with errors are analysed with what is there; nothing here
raises on missing data, it states what is missing in `notes`.
"""

from __future__ import annotations

import numpy as np

from specscope.analysis import serving
from specscope.analysis.client_health import ClientHealth
from specscope.analysis.diagnosis import facts as fx
from specscope.analysis.diagnosis.breakeven import Breakeven, breakeven, unavailable
from specscope.analysis.diagnosis.facts import Facts
from specscope.analysis.diagnosis.findings import decide
from specscope.analysis.diagnosis.series import build_series, plain
from specscope.analysis.diagnosis.verdict import reference, verdict
from specscope.analysis.fits import acceptance as acc
from specscope.analysis.headline.headline import Headline
from specscope.analysis.headline.measure import (
    Measured,
    StepTable,
    measure,
    records,
    server_step_tables,
    step_tables,
    without_loop_steps,
)
from specscope.analysis.headline.precision import summary as precision_summary
from specscope.analysis.result import HEADLINE_DETAIL_KEYS, Analysis, FindingTest
from specscope.telemetry.records import SpecRecord
from specscope.telemetry.server_info import max_commit_len_from
from specscope.trace.model import Run


def _median(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.median(v)) if v else None


def _headline_fields(out: Analysis, head: Headline | None) -> None:
    """The headline module's figures onto the analysis (one owner: analysis.headline)."""
    if head is None:
        return
    out.decode_tps = head.decode_tps
    out.mean_commit_len = head.mean_commit_len
    out.mean_step_s = head.mean_step_s
    out.commit_len_source = head.commit_len_detail or None
    out.ttft_s = head.ttft_s
    fields = head.json_fields()
    for key in HEADLINE_DETAIL_KEYS:
        setattr(out, key, fields[key])


def analyze(
    run: Run,
    *,
    baseline: Run | None = None,
    telemetry: list[SpecRecord] | None = None,
    seed: int = 0,
) -> Analysis:
    """Diagnose one run (optionally against a baseline run, with server telemetry records)."""
    telemetry = records(telemetry if telemetry is not None else run.telemetry)
    m = measure(run, telemetry, seed=seed)
    out = _measured_analysis(run, m)
    speculation = m.speculation
    out.speculation, out.speculation_reason = speculation.label, speculation.reason
    if not m.ok:
        out.no_finding_reason = "no successful request with streamed tokens: nothing to analyse"
        out.verdict = verdict(out)
        return out
    out.e2e_s = _median([r.e2e_s for r in m.main])
    if speculation.off:
        out.notes.append(f"{speculation.reason}: no drafter, so acceptance findings do not apply")
    table, mt = step_tables(m)
    span = fx.main_span(mt)
    timed, timed_main = _step_time_tables(m, table, mt, out.notes)
    st = fx.step_time_facts(timed, timed_main, span)
    server = acc.from_telemetry(telemetry) if telemetry else None
    shape = _acceptance_shape(m, table, mt, server, out.notes)
    tp = fx.two_point_facts(m, st.fit, mt)
    conc = fx.concurrency(m)
    base, be = _against_baseline(out, m, baseline, seed)
    out.step_time_model = plain(st.model)
    out.series = build_series(
        m,
        mt,
        server,
        tp,
        conc.points,
        step_profile=st.profile,
        baseline=base.series if base else None,
    )
    if be is not None:
        out.series["breakeven"] = be.curves
    facts = Facts(
        measured=m,
        speculation=speculation,
        span=span,
        step_time=st,
        shape=shape,
        two_point=tp,
        concurrency=conc,
        baseline=base,
        step_table=timed,
        main_table=mt,
        timed_main_table=timed_main,
        e2e_s=out.e2e_s,
        drift_separation=fx.drift_separation(timed, timed_main),
        client=_client_health(m, out),
    )
    _decide_onto(out, facts)
    disagreements = m.headline.disagreements if m.headline is not None else ()
    out.verdict = verdict(out, reference(facts), disagreements)
    return out


def _client_health(m: Measured, out: Analysis) -> ClientHealth | None:
    """The client's health over the main requests (measured with their headline, which it
    guards: headline.guarded_headline), onto `out.client`."""
    health = m.client
    out.client = None if health is None else health.to_json()
    return health


def _decide_onto(out: Analysis, facts: Facts) -> None:
    """The rules' decisions onto the analysis: findings, the claims not reported, every test,
    and why nothing was found when nothing was."""
    decisions = decide(facts)
    out.findings = decisions.findings
    out.notes.extend(decisions.not_reported)
    out.finding_tests = decisions.tests
    if not out.findings:
        out.no_finding_reason = _no_finding_reason(facts, decisions.tests)


def _measured_analysis(run: Run, m: Measured) -> Analysis:
    """The analysis of what was measured, before any finding: counts, errors, serving figures,
    the headline and the precision it reached."""
    out = Analysis(
        run_dir=None,
        partial=run.info.status in ("partial", "failed", "running") or bool(run.errors),
        requests=len(run.requests),
        errors=len(run.errors),
        steps_reliable=m.reliable,
        notes=list(m.notes),
    )
    measured = {r.index for r in m.ok}  # a main generation cut short by Ctrl-C is measured
    if failed := [r for r in run.errors if r.index not in measured]:
        kinds = sorted({r.error.kind for r in failed if r.error})
        out.notes.append(f"{len(failed)} request(s) failed ({', '.join(kinds)}); analysed the rest")
    out.serving = serving.serving_of_run(
        run, max_commit_len=max_commit_len_from(run.info.server_info)
    )
    _headline_fields(out, m.headline)
    out.precision = precision_summary(
        run.info.precision,
        out.decode_tps,
        out.decode_tps_ci,
        m.headline.requests if m.headline is not None else 0,
    )
    return out


def _step_time_tables(
    m: Measured, table: StepTable | None, mt: StepTable | None, notes: list[str]
) -> tuple[StepTable | None, StepTable | None]:
    """The steps the step-time fit reads: with speculation on, none inside a repetition loop
    (a loop gives the drafter something to copy at every step, so its verify steps check more
    drafted tokens and cost more: step time would grow along a generation that enters a loop,
    by the loop, not by the server)."""
    if m.speculation.on is not True:
        return table, mt
    kept, note = without_loop_steps(m, table)
    kept_main, _ = without_loop_steps(m, mt)
    if note:
        notes.append(note.replace("acceptance shape (decay and window)", "step-time fit"))
    return kept, kept_main


def _acceptance_shape(
    m: Measured,
    table: StepTable | None,
    mt: StepTable | None,
    server: acc.ServerAcceptance | None,
    notes: list[str],
) -> fx.AcceptanceShape:
    """Decay and window search on the client's steps, or on the server's per-step records when
    the client's steps cannot be trusted; steps inside repetition loops left out (a loop is
    easy to draft: it would pass for the drafter's shape)."""
    table, loop_note = without_loop_steps(m, table, checked=True)
    mt, _ = without_loop_steps(m, mt, checked=True)
    if loop_note:
        notes.append(loop_note)
    shape = (
        fx.acceptance_shape(table, mt, source=f"client steps, {m.main_label}")
        if table is not None and table.n
        else fx.AcceptanceShape()
    )
    notes.extend(shape.notes)
    if server is not None and server.per_step and server.by_request and not m.reliable:
        st_all, st_main = server_step_tables(m.ok, m.main, server)
        st_all, _ = without_loop_steps(m, st_all, checked=True)
        if st_all is not None and st_all.n:
            shape = fx.acceptance_shape(st_all, st_main, source=server.source)
            notes.extend(shape.notes)
            notes.append(f"acceptance shape from {server.source} (client steps unreliable)")
    return shape


def _against_baseline(
    out: Analysis, m: Measured, baseline: Run | None, seed: int
) -> tuple[fx.BaselineFacts | None, Breakeven | None]:
    """The split against the baseline run and the breakeven between them (onto `out`)."""
    if baseline is None:
        return None, None
    mb = measure(baseline, None, seed=seed)
    base = fx.baseline_facts(baseline, mb, m, seed=seed)
    if base is None:
        out.notes.append("baseline has no usable decode window: no attribution")
    else:
        out.attribution = base.attribution
    be = breakeven(m, mb, seed=seed)
    out.breakeven = be.to_json() if be is not None else unavailable()
    return base, be


def _drift_not_reported(t: FindingTest) -> str:
    """Why step time was not found to drift, from the same test that decided the claim."""
    if t.effect is None:
        return f"step-time drift not testable here ({t.method})"
    lo, hi = t.ci
    ci = f" (95% CI {lo:+.1%}..{hi:+.1%})" if lo is not None and hi is not None else ""
    what = f"step time drifts {t.effect:+.1%} of the mean step over the generation{ci}"
    if t.outcome == "below minimum":
        return f"{what}: below the {t.min_effect:.0%} that matters"
    return f"{what}: {t.outcome}, no step-time drift"


def _decay_not_reported(t: FindingTest | None) -> str:
    """Why no decay was reported, from the decay test's own interval: "steady" only where the
    interval rules out a change that matters; a wide one is "not shown" (three 1,500-token
    requests at T 0.7 read -47%, CI -111%..+16%, and were once called steady)."""
    if t is None or t.effect is None or None in t.ci:
        return "acceptance is steady (no decay, no window cliff)"
    lo, hi = t.ci
    what = (
        f"acceptance decay {t.effect:+.1%} over the generation (95% CI {lo:+.1%}..{hi:+.1%}; "
        "negative: it rose)"
    )
    if -t.min_effect < lo and hi < t.min_effect:
        return f"acceptance is steady: {what}, within the +-{t.min_effect:.0%} that matters"
    if t.outcome == "below minimum":
        return f"{what}: below the {t.min_effect:.0%} that matters"
    return f"no acceptance decay shown: {what}: {t.outcome}"


def _no_finding_reason(f: Facts, tests: list[FindingTest]) -> str:
    """The headline, the speculation state and the drift claim's decision: why nothing was
    reported, told from the decisions themselves (never from a second threshold)."""
    parts = []
    h = f.measured.decomposition
    if h is not None and h.decode_tps and h.mean_step_s:
        parts.append(
            f"decode {h.decode_tps:.1f} tok/s = {h.mean_commit_len:.2f} tokens/step / "
            f"{(h.mean_step_s or 0) * 1e3:.1f} ms/step"
        )
    if f.speculation is not None and f.speculation.off:
        parts.append(f"{f.speculation.reason} (nothing to accept, so no acceptance finding)")
    elif f.speculation is None or f.speculation.on is None:
        why = f.speculation.reason if f.speculation is not None else "not decided"
        parts.append(f"whether the server drafts is unknown ({why}): no drafter finding")
    elif f.shape.fit is not None and f.measured.run.info.status == "complete":
        decay = next((t for t in tests if t.id == "acceptance_decay"), None)
        parts.append(_decay_not_reported(decay))
    else:  # steady is a reading of its own: never from a cut-short run or too few steps
        why = "too few steps" if f.shape.fit is None else "the run was cut short"
        parts.append(f"acceptance along the generation not read ({why})")
    drift = next((t for t in tests if t.id == "step_time_drift"), None)
    if drift is not None:
        # the drift claim's own decision (finding_tests), in the words of its test
        parts.append(_drift_not_reported(drift))
    elif f.step_time.fit is not None and not f.step_time.fit.identifiable:
        parts.append("drift not testable with one prompt length")
    return "; ".join(parts) + "."
