"""One run digested: the successful requests, their step reconstructions, the main measurement
(the full generation when there is one) and its headline. Pure: no I/O.

Everything the diagnosis derives later (fits, shapes, series) starts from `measure(run)` and the
step tables built here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from specscope.analysis.client_health import ClientHealth
from specscope.analysis.fits.acceptance import ServerAcceptance
from specscope.analysis.headline import decompose as dec
from specscope.analysis.headline.headline import Headline, guarded_headline
from specscope.analysis.steps.reconstruct import StepReconstruction, reconstruct_steps
from specscope.analysis.steps.repetition import loop_start_position
from specscope.analysis.steps.speculation import (
    SpeculationState,
    as_stated,
    state_of_requests,
)
from specscope.telemetry.records import SpecRecord
from specscope.telemetry.server_info import max_commit_len_from
from specscope.trace import tags
from specscope.trace.model import CANCELLED, RequestTrace, Run, Step


def prompt_len(tr: RequestTrace) -> int:
    return int(tr.spec.prompt_tokens or tr.prompt_tokens_reported or 0)


def concurrency_of(tr: RequestTrace, default: int = 1) -> int:
    """The concurrency level a request ran at: its concurrency-sweep point, else `default`
    (the run's)."""
    exp, point = tags.split(tr.spec.tag)
    if exp == tags.CONCURRENCY_SWEEP and point and point.isdigit():
        return int(point)
    return default


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
    prompt = prompt_len(tr)
    for s in rec.steps:
        if s.context_len is None:
            s.context_len = prompt + s.output_pos
        s.request_index = tr.index
    return rec


def records(items: list | None) -> list[SpecRecord] | None:
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


@dataclass(frozen=True)
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

    def select(self, keep: np.ndarray) -> StepTable:
        """The rows where `keep` is True."""
        return StepTable(
            self.commit[keep], self.step_s[keep], self.context[keep], self.pos[keep], self.rid[keep]
        )


@dataclass(frozen=True)
class Measured:
    """One run digested: reconstructions, the main requests, their headline."""

    run: Run
    ok: tuple[RequestTrace, ...]
    recs: dict[int, StepReconstruction]
    main: tuple[RequestTrace, ...]
    main_label: str
    headline: Headline | None = None
    reliable: bool | None = None
    reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())
    # on / off / unknown, decided once from the reconstructions as read (before `as_stated`)
    speculation: SpeculationState = field(
        default_factory=lambda: SpeculationState(None, "not measured")
    )
    # the client's health over the main requests (None: no loop-lag samples)
    client: ClientHealth | None = None

    @property
    def decomposition(self) -> dec.Decomposition | None:
        return self.headline.decomposition if self.headline is not None else None

    @property
    def commit_len_source(self) -> str:
        return self.headline.commit_len_detail if self.headline is not None else ""

    @property
    def rows(self) -> np.ndarray | None:
        return self.headline.rows if self.headline is not None else None

    @property
    def unit(self) -> str:
        return self.headline.unit if self.headline is not None else "block"

    def reliable_steps(self, reqs: tuple[RequestTrace, ...] | list[RequestTrace]) -> list[Step]:
        return [s for r in reqs if self.recs[r.index].reliable for s in self.recs[r.index].steps]


def main_requests(traces: Sequence[RequestTrace]) -> tuple[tuple[RequestTrace, ...], str]:
    """The run's main measurement and its label: the full generation when there is one, else
    every request but the diagnose command's calibration request (all of them when that is
    all there is). The headline and the serving object's `run` both measure these."""
    full = tuple(t for t in traces if tags.split(t.spec.tag)[0] == tags.FULL_GENERATION)
    if full:
        return full, tags.FULL_GENERATION
    rest = tuple(t for t in traces if t.spec.tag != tags.CALIBRATION)
    return (rest or tuple(traces)), "all requests"


def cut_short(traces: Sequence[RequestTrace]) -> list[RequestTrace]:
    """Requests stopped by Ctrl-C (`cancelled`) that streamed at least two token reads: their
    steps are whole steps at real positions, only their ends are missing. A measurement with
    no finished request is read from these (dropping them would leave a partial run's headline
    to its 32-token calibration request); beside finished ones they are left out, since a cut
    generation holds only its early, easier positions."""
    return [
        r
        for r in traces
        if r.error is not None
        and r.error.kind == CANCELLED
        and sum(1 for c in r.chunks if c.n_tokens > 0) >= 2
    ]


def _measured(run: Run) -> tuple[RequestTrace, ...]:
    """The requests the analysis reads: those that ended well with tokens, and the full
    generations cut short by Ctrl-C where none of them ended (`cut_short`)."""
    ok = tuple(r for r in run.requests if r.ok and any(c.n_tokens > 0 for c in r.chunks))
    if any(tags.split(r.spec.tag)[0] == tags.FULL_GENERATION for r in ok):
        return ok
    cut = [r for r in cut_short(run.requests) if tags.split(r.spec.tag)[0] == tags.FULL_GENERATION]
    return tuple(sorted([*ok, *cut], key=lambda r: r.index))


def _cut_short_note(main: tuple[RequestTrace, ...]) -> str | None:
    cut = [r for r in main if not r.ok]
    if not cut:
        return None
    streamed = sum(r.tokens_received for r in cut)
    return (
        f"{len(cut)} of the {len(main)} main request(s) cut short by Ctrl-C: the "
        f"{streamed} tokens they streamed are measured, the rest of their generation is not"
    )


# How the note on a run without a decode window begins (the verdict's reason reads it).
NO_WINDOW = "no decode window"


def delivered_whole(trace: RequestTrace) -> bool:
    """Every token of the request came in its first token-bearing read: its stream holds no
    decode time (TTFT is then the whole generation's time, not prefill's)."""
    reads = trace.reads()
    return len(reads) == 1 and trace.tokens_received > 1


def all_delivered_whole(main: Sequence[RequestTrace]) -> bool:
    """Every main request came in one read (a buffered stream): TTFT is then the whole
    generation's time and no stream holds decode time, which prefill and coalescing both read."""
    return bool(main) and all(delivered_whole(t) for t in main)


def no_window_note(main: Sequence[RequestTrace]) -> str:
    """Why the main requests give no decode rate: delivered whole (a server or proxy that
    buffers the stream, a stream interval past max_tokens, or this client reading late), or
    too few tokens."""
    whole = sum(1 for t in main if delivered_whole(t))
    if whole:
        which = f"each of the {whole}" if whole == len(main) else f"{whole} of the {len(main)}"
        return (
            f"{NO_WINDOW}: {which} main request(s) came in one read, every token at once (the "
            "server or a proxy in front of it sent the generation whole, or this client read "
            "late), so the stream holds no decode time to measure"
        )
    return f"{NO_WINDOW}: fewer than two token-bearing reads in the main requests"


def measure(run: Run, telemetry: list[SpecRecord] | None, seed: int = 0) -> Measured:
    ok = _measured(run)
    mcl = max_commit_len_from(run.info.server_info)
    recs = {r.index: reconstruct(r, max_commit_len=mcl) for r in ok}
    state = state_of_requests(
        run.info.server_info, ok, [recs[r.index] for r in ok], telemetry or ()
    )
    recs = dict(zip(recs, as_stated(state, list(recs.values())), strict=True))
    main, label = main_requests(ok)
    if not main:
        return Measured(run=run, ok=ok, recs=recs, main=main, main_label=label, speculation=state)
    main_recs = [recs[r.index] for r in main]
    head, health = guarded_headline(
        main, main_recs, run.client, telemetry=telemetry, label=label, seed=seed
    )
    notes = list(head.notes)
    if (cut := _cut_short_note(main)) is not None:
        notes.append(cut)
    if head.decode_tps is None:
        notes.append(no_window_note(main))
    elif head.mean_commit_len is None:
        notes.append("steps unreliable and no server telemetry: commit length unknown")
    elif head.mean_step_s_source == "derived":
        notes.append(
            "mean step time derived as commit length / decode tps (commit length from "
            f"{head.commit_len_detail})"
        )
    return Measured(
        run=run,
        ok=ok,
        recs=recs,
        main=main,
        main_label=label,
        headline=head,
        reliable=all(rc.reliable for rc in main_recs),
        reasons=tuple(sorted({rc.reason for rc in main_recs if not rc.reliable and rc.reason})),
        notes=tuple(notes),
        speculation=state,
        client=health,
    )


def step_tables(m: Measured) -> tuple[StepTable | None, StepTable | None]:
    """(every reliable, client-timed step at concurrency 1: the fits' table; the main requests'
    reliable steps: what the costs are measured over)."""
    c1 = [
        r
        for r in m.ok
        if concurrency_of(r) == 1 and m.recs[r.index].reliable and m.recs[r.index].timed_by_client
    ]
    all_steps = [s for r in c1 for s in m.recs[r.index].steps]
    main_steps = m.reliable_steps(m.main)
    return (
        StepTable.of(all_steps) if all_steps else None,
        StepTable.of(main_steps) if main_steps else None,
    )


def without_loop_steps(
    m: Measured, table: StepTable | None, *, checked: bool = False
) -> tuple[StepTable | None, str | None]:
    """`table` without the steps inside a request's repetition loop (those that commit a token
    at or past `loop_start_position`), and a note saying what was left out (None: nothing).

    Why: the acceptance shape (decay with output position, the window cliff with context) reads
    commit length along a generation, and a loop commits 7-8 tokens a step where the answer
    committed 1-2. Pooled, short requests that loop make a "decay" (every late position
    belongs to the long requests that did not loop) and looping short prompts a "window" (the
    long prompts commit less from their first tokens on): the loop's shape, not the drafter's.
    Only the shape fits take this table; the headline and step time keep every step.

    `checked` (the acceptance shape): that a loop is easy to draft is checked, not assumed: a
    loop repeats text already in the context, so a drafter that drafts from the whole context
    commits more inside it than before it. One that commits no more there (measured on the H200: 1.0-1.5 tokens a step inside the
    loops against 1.2-3.4 before them, for an n-gram index built from the prompt alone) does
    not draft from what the model generated, and the loops are where its acceptance falls: they
    stay in the table, and the note says why. The step-time fit leaves loop steps out either
    way: a loop gives the drafter more to propose, whatever it gets accepted, and a verify step
    that checks more drafted tokens costs more."""
    if table is None or not table.n:
        return table, None
    starts = {t.index: p for t in m.ok if (p := loop_start_position(t)) is not None}
    if not starts:
        return table, None
    limit = np.asarray([starts.get(int(r), np.inf) for r in table.rid], dtype=float)
    keep = table.pos + table.commit <= limit
    left_out = int(table.n - keep.sum())
    if not left_out:
        return table, None
    looping = len({int(r) for r in table.rid[~keep]})
    inside, before = _loop_commits(table, keep)
    if checked and before is not None and inside <= before:
        note = (
            f"the repetition loops of {looping} request(s) commit {inside:.2f} tokens a step, no "
            f"more than the {before:.2f} before them: the drafter does not draft from the text "
            "the model generated (a loop repeats it), so their steps stay in the acceptance shape"
        )
        return table, note
    note = (
        f"{left_out} steps inside the repetition loops of {looping} request(s) left out of the "
        "acceptance shape (decay and window): a loop is easy to draft"
        + (f" ({inside:.2f} tokens a step inside, {before:.2f} before)" if before else "")
        + ", its steps describe the loop, not the workload"
    )
    return table.select(keep), note


def _loop_commits(table: StepTable, keep: np.ndarray) -> tuple[float, float | None]:
    """(mean commit inside the loops, mean commit before them in the same requests; None when
    no looping request has a step before its loop)."""
    looping = np.isin(table.rid, np.unique(table.rid[~keep]))
    inside = float(table.commit[~keep].mean())
    pre = keep & looping
    return inside, (float(table.commit[pre].mean()) if pre.any() else None)


def server_step_tables(
    reqs: tuple[RequestTrace, ...], main: tuple[RequestTrace, ...], server: ServerAcceptance
) -> tuple[StepTable | None, StepTable | None]:
    """Per-step server records of these requests (matched by request id) as step tables; the
    server's steps start at output position 0 (prefill's token is not a verify step there)."""

    def build(rs: tuple[RequestTrace, ...]) -> StepTable | None:
        k, ctx, pos, rid = [], [], [], []
        for r in rs:
            commits = server.by_request.get(r.request_id or "")
            if not commits:
                continue
            o = 0
            for c in commits:
                k.append(c), ctx.append(prompt_len(r) + o), pos.append(o), rid.append(r.index)
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
