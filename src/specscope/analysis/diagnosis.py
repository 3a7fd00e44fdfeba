"""The diagnosis entry point: `analyze(run, baseline=, telemetry=) -> Analysis` (comparisons of
two runs: store.compare).

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

import numpy as np

from specscope.analysis import acceptance as acc
from specscope.analysis import decompose as dec
from specscope.analysis import steptime as stm
from specscope.analysis.findings import Facts, TwoPoint, build_findings, draft_coverage, rank
from specscope.analysis.headline import Headline, headline
from specscope.analysis.model import Analysis, Attribution, Finding, Interval
from specscope.analysis.speculation import SpeculationState, speculation_state
from specscope.analysis.steps import StepReconstruction, reconstruct_steps
from specscope.telemetry.records import SpecRecord
from specscope.telemetry.server_info import max_commit_len_from
from specscope.trace import tags
from specscope.trace.model import RequestTrace, Run, Step

CALIBRATION_TAG = "calibration"  # experiments.diagnosis_plan's short sizing request
HONEYMOON_DEFAULT_WINDOW = 200  # the story's two-point window (~200 tokens) when none was run
EARLY_START = 128  # "the first tokens": acceptance before any decay, for the decay's cost


def _prompt_len(tr: RequestTrace) -> int:
    return int(tr.spec.prompt_tokens or tr.prompt_tokens_reported or 0)


def reconstruct(tr: RequestTrace, *, max_commit_len: int | None = None) -> StepReconstruction:
    """The request's steps (analysis.steps), with steps of negative or non-finite time dropped
    (a clock that went backwards keeps the request out of timing analysis) and the context
    filled from the prompt where the reconstruction had none."""
    rec = reconstruct_steps(tr, max_commit_len=max_commit_len)
    bad = [s for s in rec.steps if not (s.step_s >= 0 and np.isfinite(s.step_s))]
    if bad:
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
    recs: dict[int, StepReconstruction]
    main: list[RequestTrace]
    main_label: str
    head: Headline | None = None
    reliable: bool | None = None
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def headline(self) -> dec.Decomposition | None:
        return self.head.decomposition if self.head is not None else None

    @property
    def commit_len_source(self) -> str:
        return self.head.commit_len_detail if self.head is not None else ""

    @property
    def rows(self) -> np.ndarray | None:
        return self.head.rows if self.head is not None else None

    @property
    def unit(self) -> str:
        return self.head.unit if self.head is not None else "block"


def _concurrency_of(tr: RequestTrace) -> int:
    exp, point = tags.split(tr.spec.tag)
    if exp == tags.CONCURRENCY_SWEEP and point and point.isdigit():
        return int(point)
    return 1


def _measure(run: Run, telemetry: list[SpecRecord] | None, seed: int = 0) -> _Measured:
    ok = [r for r in run.requests if r.ok and any(c.n_tokens > 0 for c in r.chunks)]
    mcl = max_commit_len_from(run.info.server_info)
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
    m.head = headline(main, main_recs, telemetry=telemetry, label=label, seed=seed)
    m.notes.extend(m.head.notes)
    if m.head.decode_tps is None:
        m.notes.append("no decode window: fewer than two token-bearing chunks in the main requests")
    elif m.head.mean_commit_len is None:
        m.notes.append("steps unreliable and no server telemetry: commit length unknown")
    elif m.head.mean_step_s_source == "derived":
        m.notes.append(
            "mean step time derived as commit length / decode tps (commit length from "
            f"{m.head.commit_len_detail})"
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
        ),
        n2,
    )


def _series_groups(
    reqs: list[RequestTrace], recs: dict[int, StepReconstruction], key
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


def _draft_coverage(head: Headline | None, facts: Facts) -> list[Finding]:
    if head is None or head.share_counts is None:
        return []
    drafted, steps = head.share_counts
    return draft_coverage(drafted, steps, head.mean_commit_len,
                          head.mean_commit_len_per_drafted_step, head.decode_tps,
                          source=head.share_source or "", speculation=facts.speculation)


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
    for key in ("mean_commit_len_source", "mean_commit_len_per_drafted_step",
                "drafted_step_share", "mean_step_s_source", "decode_tps_ci",
                "mean_commit_len_ci", "mean_step_s_ci", "ttft_s_ci", "interval_method"):
        setattr(out, key, fields[key])


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
    m = _measure(run, telemetry, seed=seed)
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
    _headline_fields(out, m.head)
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
        if _concurrency_of(r) == 1 and m.recs[r.index].reliable and m.recs[r.index].timed_by_client
    ]
    all_steps = [s for r in c1 for s in m.recs[r.index].steps]
    main_steps = [s for r in m.main if m.recs[r.index].reliable for s in m.recs[r.index].steps]
    table = StepTable.of(all_steps) if all_steps else None
    mt = StepTable.of(main_steps) if main_steps else None
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

    # --- two-point vs full, honeymoon --------------------------------------------------------
    tp, n2 = _two_point(m.ok)
    facts.two_point = tp
    n2_steps = [s for r in n2 if m.recs[r.index].reliable for s in m.recs[r.index].steps]
    if tp is not None:
        win = [s for s in n2_steps if s.output_pos >= tp.n1]
        if win:
            facts.two_point_window_step_s = float(np.mean([s.step_s for s in win]))
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
            facts.concurrency.append((c, float(np.mean(tps)), float(np.mean(st)) if st else None))

    # --- baseline ------------------------------------------------------------------------------
    if baseline is not None:
        mb = _measure(baseline, None, seed=seed)
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
    out.findings = rank([*build_findings(facts), *_draft_coverage(m.head, facts)], facts)
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
