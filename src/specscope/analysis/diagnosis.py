"""The diagnosis entry points: `analyze(run, baseline=, telemetry=) -> Analysis` and
`compare_runs(a, b) -> Comparison`.

The reasoning of the story (shared/seed/), as code:
1. headline numbers from the user's real shape (the full_generation requests when present);
2. tps = commit length / step time, and versus a baseline the exact acceptance x step-time split;
3. step time against context with steps of every request (different prompt lengths separate the
   context effect from output-length drift);
4. commit length against output position and context (honeymoon decay vs the drafter's window);
5. the two-point window against the full generation (the short window's blind spot);
6. findings with evidence, ranked.
Partial runs and runs with errors are analysed with what is there; nothing here raises on
missing data, it states what is missing in `notes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from math import gcd

import numpy as np
from pydantic import BaseModel, Field

from specscope.analysis import acceptance as acc
from specscope.analysis import decompose as dec
from specscope.analysis import steptime as stm
from specscope.analysis.findings import Facts, TwoPoint, decide
from specscope.analysis.model import Analysis, Attribution, Finding, Interval
from specscope.analysis.speculation import SpeculationState, speculation_state
from specscope.telemetry.records import SpecRecord
from specscope.trace import tags
from specscope.trace.model import RequestTrace, Run, Step

CALIBRATION_TAG = "calibration"  # experiments.diagnosis_plan's short sizing request
HONEYMOON_DEFAULT_WINDOW = 200  # the story's two-point window (~200 tokens) when none was run
EARLY_START = 128  # "the first tokens": acceptance before any decay, for the decay's cost
DISAGREEMENT = 0.05  # client vs server commit length: more than 5% apart is worth a note


@dataclass
class Reconstruction:
    steps: list[Step]
    reliable: bool
    reason: str = ""
    method: str = "chunk"
    # False when commit lengths are exact but step times are not (server per-step lists spread
    # over the decode window because chunk and step counts differ): no step-time fit from them
    timing_reliable: bool = True


def _prompt_len(tr: RequestTrace) -> int:
    return int(tr.spec.prompt_tokens or tr.prompt_tokens_reported or 0)


def _fallback_steps(tr: RequestTrace) -> Reconstruction:
    """One chunk = one verify step (ARCHITECTURE §4), with the coalescing checks: fewer chunks
    than the server's verify count, or chunk sizes sharing a stream interval > 1."""
    chunks = [c for c in tr.chunks if c.n_tokens > 0]
    prompt = _prompt_len(tr)
    steps: list[Step] = []
    if len(chunks) < 2:
        return Reconstruction(steps, False, "fewer than two token-bearing chunks")
    pos = chunks[0].n_tokens
    for prev, c in pairwise(chunks):
        steps.append(
            Step(
                t_end_ns=c.t_ns,
                commit_len=c.n_tokens,
                step_s=(c.t_ns - prev.t_ns) / 1e9,
                context_len=prompt + pos,
                output_pos=pos,
                source="chunk",
                request_index=tr.index,
            )
        )
        pos += c.n_tokens
    reasons = []
    ss = tr.server_spec
    if ss and ss.verify_ct and len(chunks) < 0.9 * ss.verify_ct:
        reasons.append(f"{len(chunks)} chunks for {ss.verify_ct} server verify steps")
    sizes = [c.n_tokens for c in chunks[:-1]]
    if len(sizes) >= 5:
        g = 0
        for n in sizes:
            g = gcd(g, n)
        if g > 1:
            reasons.append(f"every chunk is a multiple of {g} tokens (stream interval {g})")
    if ss and ss.verify_ct and len(chunks) > 1.5 * ss.verify_ct and max(sizes or [1]) == 1:
        reasons.append("one event per token (needs burst clustering)")
    return Reconstruction(steps, not reasons, "; ".join(reasons))


def max_commit_from(server_info: dict) -> int | None:
    """The largest possible commit length (drafts + 1) when the server says it."""
    for key in ("speculative_num_draft_tokens", "num_draft_tokens", "speculative_num_steps"):
        v = server_info.get(key)
        if isinstance(v, int) and v > 0:
            return v + (1 if key == "speculative_num_steps" else 0)
    return None


def reconstruct(tr: RequestTrace, *, max_commit_len: int | None = None) -> Reconstruction:
    """PROBE's reconstruct_steps when available (bursts, coalescing detection, server merge),
    else the chunk-per-step fallback. Context is filled from the prompt when missing."""
    try:
        from specscope.analysis.steps import reconstruct_steps  # PROBE's module

        r = reconstruct_steps(tr, max_commit_len=max_commit_len)
        reason = str(getattr(r, "reason", "") or "")
        rec = Reconstruction(
            list(r.steps),
            bool(r.reliable),
            reason,
            str(getattr(r, "method", "")),
            timing_reliable="spread evenly" not in reason,
        )
    except (ImportError, AttributeError, TypeError):
        rec = _fallback_steps(tr)
    bad = [s for s in rec.steps if not (s.step_s >= 0 and np.isfinite(s.step_s))]
    if bad:  # clock went backwards or garbage: keep the request out of timing analysis
        bad_ids = {id(s) for s in bad}
        rec.steps = [s for s in rec.steps if id(s) not in bad_ids]
        rec.reliable = False
        rec.reason = "; ".join(x for x in (rec.reason, f"{len(bad)} steps with negative time") if x)
    prompt = _prompt_len(tr)
    for s in rec.steps:
        if s.context_len is None:
            s.context_len = prompt + s.output_pos
        s.request_index = tr.index
    return rec


@dataclass
class StepTable:
    """Steps of many requests as columns (for the fits)."""

    commit: np.ndarray
    step_s: np.ndarray
    context: np.ndarray
    pos: np.ndarray
    rid: np.ndarray

    @classmethod
    def of(cls, steps: list[Step]) -> StepTable:
        return cls(
            commit=np.asarray([s.commit_len for s in steps], dtype=float),
            step_s=np.asarray([s.step_s for s in steps], dtype=float),
            context=np.asarray([s.context_len or 0 for s in steps], dtype=float),
            pos=np.asarray([s.output_pos for s in steps], dtype=float),
            rid=np.asarray([s.request_index for s in steps], dtype=int),
        )

    @property
    def n(self) -> int:
        return int(self.commit.size)


@dataclass
class _Measured:
    """One run digested: reconstructions, groups, headline."""

    run: Run
    ok: list[RequestTrace]
    recs: dict[int, Reconstruction]
    main: list[RequestTrace]
    main_label: str
    headline: dec.Decomposition | None = None
    commit_len_source: str = ""
    reliable: bool | None = None
    reasons: list[str] = field(default_factory=list)
    rows: np.ndarray | None = None
    unit: str = "block"
    notes: list[str] = field(default_factory=list)
    decode_tps_only: float | None = None  # when steps are unreliable and L is unknown


def _concurrency_of(tr: RequestTrace) -> int:
    exp, point = tags.split(tr.spec.tag)
    if exp == tags.CONCURRENCY_SWEEP and point and point.isdigit():
        return int(point)
    return 1


def _server_commit(reqs: list[RequestTrace]) -> tuple[float | None, float, str]:
    """Commit length from per-request server fields, weighted by verify count."""
    tok = n = 0.0
    src = ""
    for r in reqs:
        ss = r.server_spec
        if ss is None:
            continue
        if ss.per_step_accepted:
            tok += sum(a + 1 for a in ss.per_step_accepted)
            n += len(ss.per_step_accepted)
        elif ss.verify_ct and ss.accept_length:
            tok += ss.accept_length * ss.verify_ct
            n += ss.verify_ct
        elif ss.verify_ct and r.completion_tokens:
            tok += r.completion_tokens
            n += ss.verify_ct
        else:
            continue
        src = ss.source or "server per-request fields"
    return (tok / n if n else None), n, src


def _measure(run: Run, telemetry: list[SpecRecord] | None) -> _Measured:
    ok = [r for r in run.requests if r.ok and any(c.n_tokens > 0 for c in r.chunks)]
    mcl = max_commit_from(run.info.server_info)
    recs = {r.index: reconstruct(r, max_commit_len=mcl) for r in ok}
    full = [r for r in ok if tags.split(r.spec.tag)[0] == tags.FULL_GENERATION]
    # without a full generation, every request but the diagnose command's calibration request
    rest = [r for r in ok if r.spec.tag != CALIBRATION_TAG] or ok
    main, label = (full, "full_generation") if full else (rest, "all requests")
    m = _Measured(run=run, ok=ok, recs=recs, main=main, main_label=label)
    if not main:
        return m
    main_recs = [recs[r.index] for r in main]
    m.reliable = all(rc.reliable for rc in main_recs)
    m.reasons = sorted({rc.reason for rc in main_recs if not rc.reliable and rc.reason})
    steps = [s for rc in main_recs for s in rc.steps]
    server_steps = acc.from_telemetry(telemetry or []) if telemetry else None
    main_ids = {r.request_id for r in main if r.request_id}
    if m.reliable and steps and sum(s.step_s for s in steps) > 0:
        t = StepTable.of(steps)
        m.headline = dec.decompose(t.commit, t.step_s)
        m.commit_len_source = f"client chunks ({m.main_label})"
        m.rows, m.unit = dec.units(t.commit, t.step_s, t.rid)
        if server_steps and server_steps.per_step and main_ids & set(server_steps.by_request):
            vals = [v for k, v in server_steps.by_request.items() if k in main_ids for v in v]
            srv = float(np.mean(vals))
            cl = m.headline.mean_commit_len or 0
            if cl and abs(srv / cl - 1) > DISAGREEMENT:
                m.notes.append(
                    f"client steps say {cl:.2f} tokens/step, server per-step records {srv:.2f}: "
                    "chunks may merge or split steps"
                )
        return m
    # unreliable steps: tps from decode windows (chunking-independent), L from the server
    windows = [w for w in (r.decode_window() for r in main) if w]
    tokens = float(sum(w[0] for w in windows))
    seconds = float(sum(w[1] for w in windows))
    L, _, src = _server_commit(main)
    if (
        L is None
        and server_steps
        and server_steps.per_step
        and main_ids & set(server_steps.by_request)
    ):
        vals = [v for k, v in server_steps.by_request.items() if k in main_ids for v in v]
        L, src = float(np.mean(vals)), server_steps.source
    if L is None and server_steps and server_steps.mean_commit_len:
        L, src = server_steps.mean_commit_len, server_steps.source + " (whole log window)"
    if tokens <= 0 or seconds <= 0:
        m.notes.append("no decode window: fewer than two token-bearing chunks in the main requests")
        return m
    if L is None:
        m.notes.append("steps unreliable and no server telemetry: commit length unknown")
        m.headline = None
        m.commit_len_source = ""
        m.decode_tps_only = tokens / seconds
        return m
    m.headline = dec.Decomposition(tokens=tokens, steps=tokens / L, seconds=seconds)
    m.commit_len_source = src
    rows = []
    for r in main:
        w = r.decode_window()
        if w:
            rows.append((w[0], w[0] / L, w[1]))
    m.rows, m.unit = np.asarray(rows, dtype=float).reshape(-1, 3), "request"
    m.notes.append(
        f"mean step time derived as commit length / decode tps (commit length from {src})"
    )
    return m


def _acceptance_shape(
    facts: Facts, out: Analysis, table: StepTable, mt: StepTable | None, *, source: str
) -> None:
    """Decay / window model search over `table` (every request), costs over `mt` (main)."""
    # the last step of a request cut by max_tokens commits only the tokens left: it says
    # nothing about the drafter, so the acceptance fit leaves it out
    keep = np.ones(table.n, dtype=bool)
    last_of = {int(r): i for i, r in enumerate(table.rid)}
    keep[list(last_of.values())] = False
    a_fit = acc.fit_acceptance(table.commit[keep], table.context[keep], table.pos[keep])
    facts.acc_fit = a_fit
    facts.acceptance_table = table
    facts.acceptance_source = source
    if a_fit is None or mt is None or not mt.n:
        return
    L_main = float(mt.commit.mean())
    if a_fit.window_present and a_fit.window is not None and L_main > 0:
        w = a_fit.window
        lifted = mt.commit - w.coef * (mt.context >= (w.at or 0))
        facts.window_cost = float(lifted.mean() / L_main)
    if a_fit.decay_present and a_fit.decay is not None and L_main > 0:
        # what the main requests would commit without decay: the acceptance of the first
        # tokens (pooled over every request, below any window), over the main mean with the
        # window cliff already lifted (so decay x window = the total shape cost)
        early = keep & (table.pos < EARLY_START)
        if a_fit.window_present and a_fit.window is not None:
            early &= table.context < (a_fit.window.at or 0)
        start = a_fit.decay.before
        if early.sum() >= 20:
            # extrapolated to position 0: the decay has already begun in the first tokens
            x = np.column_stack([np.ones(int(early.sum())), table.pos[early]])
            beta, *_ = np.linalg.lstsq(x, table.commit[early], rcond=None)
            start = float(max(beta[0], table.commit[early].mean()))
        facts.decay_cost = start / (L_main * (facts.window_cost or 1.0))
    out.notes.extend(a_fit.notes)


def _server_step_tables(
    reqs: list[RequestTrace], main: list[RequestTrace], server: acc.ServerAcceptance
) -> tuple[StepTable | None, StepTable | None]:
    """Per-step server records of these requests (matched by request id) as step tables; the
    server's steps start at output position 0 (prefill's token is not a verify step there)."""

    def build(rs: list[RequestTrace]) -> StepTable | None:
        k, ctx, pos, rid = [], [], [], []
        for r in rs:
            commits = server.by_request.get(r.request_id or "")
            if not commits:
                continue
            o = 0
            for c in commits:
                k.append(c), ctx.append(_prompt_len(r) + o), pos.append(o), rid.append(r.index)
                o += c
        if not k:
            return None
        return StepTable(
            commit=np.asarray(k, float),
            step_s=np.full(len(k), np.nan),
            context=np.asarray(ctx, float),
            pos=np.asarray(pos, float),
            rid=np.asarray(rid, int),
        )

    return build(reqs), build(main)


def _records(items: list | None) -> list[SpecRecord] | None:
    """SpecRecords from records or their dicts (run.telemetry holds dicts); malformed skipped."""
    if not items:
        return None
    out: list[SpecRecord] = []
    for d in items:
        if isinstance(d, SpecRecord):
            out.append(d)
            continue
        try:
            out.append(SpecRecord.model_validate(d))
        except (ValueError, TypeError):  # a malformed record is skipped, the rest still counts
            continue
    return out or None


def _median(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.median(v)) if v else None


def _two_point(ok: list[RequestTrace]) -> tuple[TwoPoint | None, list[RequestTrace]]:
    n1 = [r for r in ok if r.spec.tag == tags.make(tags.TWO_POINT, "n1") and r.e2e_s]
    n2 = [r for r in ok if r.spec.tag == tags.make(tags.TWO_POINT, "n2") and r.e2e_s]
    if not n1 or not n2:
        return None, n2

    def toks(r: RequestTrace) -> int:
        return r.completion_tokens if r.completion_tokens is not None else r.tokens_received

    # means, not medians: a stall in one repeat is part of the throughput the full generation
    # also pays, and a median would hide it from the two-point side only
    t1, t2 = float(np.mean([r.e2e_s for r in n1])), float(np.mean([r.e2e_s for r in n2]))
    k1, k2 = float(np.mean([toks(r) for r in n1])), float(np.mean([toks(r) for r in n2]))
    if not t1 or not t2 or t2 <= t1 or k2 <= k1:
        return None, n2
    per = [
        (toks(b) - toks(a)) / (b.e2e_s - a.e2e_s)
        for a, b in zip(n1, n2, strict=False)
        if b.e2e_s > a.e2e_s and toks(b) > toks(a)
    ]
    med = float(np.median(per)) if per else 0.0
    spread = float((max(per) - min(per)) / med) if len(per) > 1 and med > 0 else 0.0
    return (
        TwoPoint(
            n1=round(k1),
            n2=round(k2),
            prompt_tokens=_prompt_len(n2[0]) or None,
            decode_tps=(k2 - k1) / (t2 - t1),
            repeats=min(len(n1), len(n2)),
            spread=spread,
            rates=tuple(per),
        ),
        n2,
    )


def _series_groups(
    reqs: list[RequestTrace], recs: dict[int, Reconstruction], key
) -> dict[int, dec.Decomposition]:
    out: dict[int, list[Step]] = {}
    for r in reqs:
        k = key(r)
        if k is None or not recs[r.index].reliable:
            continue
        out.setdefault(k, []).extend(recs[r.index].steps)
    return {
        k: dec.decompose([s.commit_len for s in v], [s.step_s for s in v])
        for k, v in sorted(out.items())
        if v
    }


def _ci_interval(point: float | None, ci: tuple[float, float] | None) -> Interval | None:
    if point is None:
        return None
    return Interval(value=point, low=ci[0] if ci else None, high=ci[1] if ci else None)


def analyze(
    run: Run,
    *,
    baseline: Run | None = None,
    telemetry: list[SpecRecord] | None = None,
    seed: int = 0,
) -> Analysis:
    """Diagnose one run (optionally against a baseline run, with server telemetry records)."""
    telemetry = _records(telemetry if telemetry is not None else run.telemetry)
    m = _measure(run, telemetry)
    out = Analysis(
        run_dir=None,
        partial=run.info.status in ("partial", "failed", "running") or bool(run.errors),
        requests=len(run.requests),
        errors=len(run.errors),
        steps_reliable=m.reliable,
        notes=list(m.notes),
    )
    if run.errors:
        kinds = sorted({r.error.kind for r in run.errors if r.error})
        out.notes.append(
            f"{len(run.errors)} request(s) failed ({', '.join(kinds)}); analysed the rest"
        )
    if not m.ok:
        out.no_finding_reason = "no successful request with streamed tokens: nothing to analyse"
        return out

    h = m.headline
    out.decode_tps = h.decode_tps if h else m.decode_tps_only
    out.mean_commit_len = h.mean_commit_len if h else None
    out.mean_step_s = h.mean_step_s if h else None
    out.commit_len_source = m.commit_len_source or None
    out.ttft_s = _median([r.ttft_s for r in m.main])
    out.e2e_s = _median([r.e2e_s for r in m.main])

    facts = Facts(
        main_label=m.main_label,
        headline=h,
        commit_len_source=m.commit_len_source,
        steps_reliable=m.reliable,
        unreliable_reasons=m.reasons,
        ttft_s=out.ttft_s,
        e2e_s=out.e2e_s,
        server_info=dict(run.info.server_info),
        flavor=run.info.flavor,
    )
    facts.client_commit_len = out.mean_commit_len
    facts.speculation = _speculation(m, telemetry)
    if facts.speculation.off:
        out.notes.append(
            f"{facts.speculation.reason}: no drafter, so acceptance findings do not apply"
        )

    # --- all reliable steps at concurrency 1: the fits ----------------------------------------
    c1 = [
        r
        for r in m.ok
        if _concurrency_of(r) == 1 and m.recs[r.index].reliable and m.recs[r.index].timing_reliable
    ]
    all_steps = [s for r in c1 for s in m.recs[r.index].steps]
    main_steps = [s for r in m.main if m.recs[r.index].reliable for s in m.recs[r.index].steps]
    table = StepTable.of(all_steps) if all_steps else None
    mt = StepTable.of(main_steps) if main_steps else None
    facts.main_table = mt
    facts.step_table = table
    facts.main_prefill_shares = [r.ttft_s / r.e2e_s for r in m.main if r.ttft_s and r.e2e_s]
    facts.main_chunk_gaps = [
        list(np.diff([c.t_ns for c in r.chunks if c.n_tokens > 0]) / 1e9) for r in m.main
    ]
    if mt is not None and mt.n:
        facts.main_context = (float(mt.context.min()), float(mt.context.max()))
        facts.main_output_span = float(mt.pos.max() - mt.pos.min())
        facts.main_prompt = float(np.median(mt.context - mt.pos))

    if table is not None and table.n:
        fit = stm.fit_step_time(
            table.step_s, table.context, table.pos, commit_len=table.commit, request_ids=table.rid
        )
        facts.step_fit = fit
        if fit is not None:
            out.step_time_model = fit.to_dict()
            if mt is not None and mt.n:
                mean_s = float(mt.step_s.mean())
                facts.drift = stm.drift_test(
                    fit, span_tokens=facts.main_output_span, mean_step_s=mean_s
                )
                if fit.per_output_token is not None:
                    no_drift = mt.step_s - fit.per_output_token * mt.pos
                    if no_drift.mean() > 0 and facts.drift is not None and facts.drift.present:
                        facts.drift_cost = float(mt.step_s.mean() / no_drift.mean())
                    expected = fit.expected(mt.context, mt.commit)
                    ctx_part = fit.per_context_token * float(mt.context.mean())
                    facts.context_share = (
                        ctx_part / float(expected.mean()) if expected.mean() > 0 else None
                    )
                else:
                    # confounded: the growth along the generation, start vs end, by the fitted slope
                    lo, hi = facts.main_context or (0, 0)
                    facts.growth_along_generation = stm.context_effect(fit, lo, hi)
                    expected = fit.expected(mt.context, mt.commit)
                xs, ys = stm.binned_profile(mt.pos, mt.step_s)
                _, es = stm.binned_profile(mt.pos, expected)
                out.series["step_time_by_position"] = {
                    "output_pos": xs.tolist(),
                    "step_s": ys.tolist(),
                    "expected_step_s": es.tolist(),
                }
                if fit.per_output_token is not None:
                    out.step_time_model["context_effect_s"] = fit.per_context_token * float(
                        np.ptp(mt.context)
                    )
                    out.step_time_model["output_effect_s"] = (
                        fit.per_output_token * facts.main_output_span
                    )
                    out.step_time_model["excess_step_s_mean"] = float((mt.step_s - expected).mean())

        _acceptance_shape(facts, out, table, mt, source=f"client steps, {m.main_label}")

    # --- server telemetry ------------------------------------------------------------------
    server = acc.from_telemetry(telemetry) if telemetry else None
    facts.server = server
    if server is not None and server.per_step and server.by_request and not m.reliable:
        # client steps cannot be trusted: the decay / window search runs on the server's steps
        st_all, st_main = _server_step_tables(m.ok, m.main, server)
        if st_all is not None and st_all.n:
            _acceptance_shape(facts, out, st_all, st_main, source=server.source)
            out.notes.append(f"acceptance shape from {server.source} (client steps unreliable)")
    if (
        server
        and server.mean_commit_len
        and out.mean_commit_len
        and m.commit_len_source.startswith("client")
        and abs(server.mean_commit_len / out.mean_commit_len - 1) > DISAGREEMENT
    ):
        out.notes.append(
            f"server telemetry ({server.source}) says {server.mean_commit_len:.2f} tokens/step over "
            f"its window, the client {out.mean_commit_len:.2f} over {m.main_label}"
            + (
                " (the server's figure is per drafted step: it is higher wherever steps draft "
                "nothing, as n-gram lookup often does)"
                if server.per_drafted_step
                else ""
            )
        )

    # --- two-point vs full, honeymoon --------------------------------------------------------
    tp, n2 = _two_point(m.ok)
    facts.two_point = tp
    n2_steps = [s for r in n2 if m.recs[r.index].reliable for s in m.recs[r.index].steps]
    if tp is not None:
        win = [s for s in n2_steps if s.output_pos >= tp.n1]
        if win:
            facts.two_point_window_step_s = float(np.mean([s.step_s for s in win]))
            facts.two_point_window = StepTable.of(win)
    if tp is not None and facts.step_fit is not None and mt is not None and mt.n:
        # the two-point may sit at another context than the full generation: what the context
        # term alone predicts for the ratio of their step times (not a bias; allowed for)
        fit = facts.step_fit
        tp_ctx = (tp.prompt_tokens or 0) + (tp.n1 + tp.n2) / 2
        s_tp = fit.s0 + fit.per_context_token * tp_ctx
        s_full = fit.s0 + fit.per_context_token * float(mt.context.mean())
        if s_tp > 0 and s_full > 0:
            facts.two_point_context_factor = s_full / s_tp
    if mt is not None and mt.n:
        start, width = (tp.n1, tp.n2 - tp.n1) if tp else (0, HONEYMOON_DEFAULT_WINDOW)
        facts.honeymoon = acc.honeymoon(
            mt.commit, mt.step_s, mt.pos, window_tokens=width, start=start
        )

    # --- concurrency ---------------------------------------------------------------------------
    conc: dict[int, list[RequestTrace]] = {}
    for r in m.ok:
        if tags.split(r.spec.tag)[0] == tags.CONCURRENCY_SWEEP:
            conc.setdefault(_concurrency_of(r), []).append(r)
    for c, rs in sorted(conc.items()):
        tps = [w[0] / w[1] for w in (r.decode_window() for r in rs) if w]
        st = [s.step_s for r in rs if m.recs[r.index].reliable for s in m.recs[r.index].steps]
        if tps:
            facts.concurrency_samples[c] = tps
            facts.concurrency.append((c, float(np.mean(tps)), float(np.mean(st)) if st else None))

    # --- baseline ------------------------------------------------------------------------------
    if baseline is not None:
        mb = _measure(baseline, None)
        if mb.headline is not None and h is not None:
            facts.baseline = mb.headline
            facts.baseline_speculation = _speculation(mb, None)
            facts.split = dec.split(mb.headline, h)
            ci = None
            # a bootstrap over one unit is a point, not an interval: CIs need >= 2 units a side
            if (
                mb.rows is not None
                and m.rows is not None
                and len(mb.rows) >= 2
                and len(m.rows) >= 2
            ):
                ci = dec.split_ci(mb.rows, m.rows, unit=m.unit, seed=seed)
            facts.split_ci = ci
            sp = facts.split
            out.attribution = Attribution(
                tps_ratio=sp.tps_ratio if sp else None,
                acceptance_factor=sp.acceptance_factor if sp else None,
                step_time_factor=sp.step_time_factor if sp else None,
                tps_ratio_ci=_ci_interval(sp.tps_ratio, ci.tps_ratio) if sp and ci else None,
                acceptance_factor_ci=_ci_interval(sp.acceptance_factor, ci.acceptance_factor)
                if sp and ci
                else None,
                step_time_factor_ci=_ci_interval(sp.step_time_factor, ci.step_time_factor)
                if sp and ci
                else None,
                baseline_run=baseline.info.run_id or None,
            )
            out.series["baseline_vs_observed"] = {
                "label": ["baseline", "observed"],
                "decode_tps": [mb.headline.decode_tps, h.decode_tps],
                "mean_commit_len": [mb.headline.mean_commit_len, h.mean_commit_len],
                "mean_step_s": [mb.headline.mean_step_s, h.mean_step_s],
            }
        else:
            out.notes.append("baseline has no usable decode window: no attribution")

    # --- series --------------------------------------------------------------------------------
    _fill_series(out, m, facts, mt, server)

    out.step_time_model = _plain(out.step_time_model)
    out.series = _plain(out.series)
    decisions = decide(facts)
    out.findings = decisions.findings
    out.notes.extend(decisions.not_reported)
    out.finding_tests = decisions.tests
    if not out.findings:
        out.no_finding_reason = _no_finding_reason(facts)
    return out


def _fill_series(out: Analysis, m: _Measured, facts: Facts, mt: StepTable | None, server) -> None:
    if server is not None and server.per_step and server.histogram:
        hist, src = server.histogram, server.source
    elif mt is not None and mt.n:
        hist, src = acc.histogram(mt.commit), f"client chunks ({m.main_label})"
    else:
        hist, src = {}, ""
        merged: dict[int, int] = {}
        for r in m.main:
            hh = r.server_spec.accept_histogram if r.server_spec else None
            for k, v in enumerate(hh or []):
                merged[k + 1] = merged.get(k + 1, 0) + int(v)
        if merged:
            hist, src = dict(sorted(merged.items())), "server per-request accept histogram"
    if hist:
        out.series["commit_len_histogram"] = {
            "commit_len": list(hist),
            "count": list(hist.values()),
            "source": src,
        }
    if mt is not None and mt.n:
        starts, means, _ = acc.profile_by_position(mt.pos, mt.commit)
        out.series["commit_len_by_position"] = {
            "output_pos": starts.tolist(),
            "mean_commit_len": means.tolist(),
        }
    sweep = [r for r in m.ok if tags.split(r.spec.tag)[0] == tags.CONTEXT_SWEEP]
    groups = _series_groups(
        sweep or [r for r in m.ok if _concurrency_of(r) == 1],
        m.recs,
        lambda r: _prompt_len(r) or None,
    )
    if groups:
        out.series["tps_by_context"] = {
            "context": list(groups),
            "decode_tps": [d.decode_tps for d in groups.values()],
            "step_s": [d.mean_step_s for d in groups.values()],
            "commit_len": [d.mean_commit_len for d in groups.values()],
        }
    osw = [r for r in m.ok if tags.split(r.spec.tag)[0] == tags.OUTPUT_SWEEP]
    og = _series_groups(osw, m.recs, lambda r: r.spec.max_tokens)
    if og:
        out.series["tps_by_output_len"] = {
            "max_tokens": list(og),
            "decode_tps": [d.decode_tps for d in og.values()],
        }
    if facts.two_point is not None and out.decode_tps:
        tp = facts.two_point
        out.series["two_point_vs_full"] = {
            "label": [f"two-point {tp.n1}->{tp.n2} @ {tp.prompt_tokens}", f"{m.main_label}"],
            "decode_tps": [tp.decode_tps, out.decode_tps],
        }
    if facts.concurrency:
        out.series["concurrency"] = {
            "concurrency": [c for c, _, _ in facts.concurrency],
            "decode_tps_per_request": [t for _, t, _ in facts.concurrency],
            "step_s": [s for _, _, s in facts.concurrency],
        }


def _plain(x):
    """numpy scalars/arrays to plain Python, so that analysis.json serialises."""
    if isinstance(x, dict):
        return {(_plain(k) if isinstance(k, np.generic) else k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return _plain(x.tolist())
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def _speculation(m: _Measured, telemetry: list[SpecRecord] | None) -> SpeculationState:
    """On / off / unknown for this run, from its reliable client steps, the server's
    per-request fields, its info endpoint and any telemetry records."""
    commits = [
        float(s.commit_len)
        for r in m.ok
        if m.recs[r.index].reliable
        for s in m.recs[r.index].steps
    ]
    return speculation_state(
        m.run.info.server_info, commits, (r.server_spec for r in m.ok), telemetry or ()
    )


def _no_finding_reason(f: Facts) -> str:
    parts = []
    if f.headline is not None and f.headline.decode_tps and f.headline.mean_step_s:
        parts.append(
            f"decode {f.headline.decode_tps:.1f} tok/s = {f.headline.mean_commit_len:.2f} tokens/step / "
            f"{(f.headline.mean_step_s or 0) * 1e3:.1f} ms/step"
        )
    if f.speculation is not None and f.speculation.off:
        parts.append(f"{f.speculation.reason} (nothing to accept, so no acceptance finding)")
    else:
        parts.append("acceptance is steady (no decay, no window cliff)")
    if f.drift is not None:
        d = f.drift
        if not d.significant:
            parts.append(f"no significant step-time drift with output position (z={d.z:.1f} < 3)")
        elif d.slope_s_per_token <= 0:
            parts.append(f"step time does not grow with output position (z={d.z:.1f})")
        else:
            parts.append(
                f"step time grows {d.slope_s_per_token * 1e6:.1f} us per output token (z={d.z:.1f}), "
                f"{d.share:.0%} of the step over the generation: too small to count as drift"
            )
    elif f.step_fit is not None and not f.step_fit.identifiable:
        parts.append("drift not testable with one prompt length")
    return "; ".join(parts) + "."


class Comparison(BaseModel):
    """`specscope compare A B`: B (observed) against A (baseline).
    tps_ratio = tps_A / tps_B = acceptance_factor * step_time_factor."""

    tps_ratio: float | None = None
    acceptance_factor: float | None = None
    step_time_factor: float | None = None
    attribution: Attribution | None = None
    findings: list[Finding] = Field(default_factory=list)  # in B (with factors vs A), not in A
    resolved: list[str] = Field(default_factory=list)  # finding ids in A that B no longer has
    a: Analysis
    b: Analysis


# Findings whose baseline-relative form (factor set: B measured against A) makes a claim about
# the comparison itself, whatever A's own diagnosis said: "B is slower than plain A because of
# speculation", "B's commit length is below A's". A holding the same id alone (say, a low commit
# length without a baseline) does not make B's comparative finding old news.
COMPARATIVE_IDS = frozenset({"speculation_overhead", "acceptance_low"})


def differing_findings(a_findings: list[Finding], b_findings: list[Finding]) -> list[Finding]:
    """The findings that matter for comparing B with A: B's findings that A does not have,
    plus B's comparative findings measured against A (see COMPARATIVE_IDS)."""
    ids_a = {f.id for f in a_findings}
    return [
        f
        for f in b_findings
        if f.id not in ids_a or (f.id in COMPARATIVE_IDS and f.factor is not None)
    ]


def compare_runs(a: Run, b: Run, *, seed: int = 0) -> Comparison:
    """B against A as the baseline; the findings that differ between the two runs."""
    an_a = analyze(a, seed=seed)
    an_b = analyze(b, baseline=a, seed=seed)
    ids_a = {f.id for f in an_a.findings}
    ids_b = {f.id for f in an_b.findings}
    at = an_b.attribution
    return Comparison(
        tps_ratio=at.tps_ratio if at else None,
        acceptance_factor=at.acceptance_factor if at else None,
        step_time_factor=at.step_time_factor if at else None,
        attribution=at,
        findings=differing_findings(an_a.findings, an_b.findings),
        resolved=sorted(ids_a - ids_b),
        a=an_a,
        b=an_b,
    )
