"""The headline numbers, computed in one place: decode tps, commit length, step time, TTFT, where
each came from, and their 95% intervals. Pure: no I/O. probe, diagnose, report, compare and the
store all get these figures from `headline()`, so one run prints one tokens/s everywhere (`logs`
shares its rule for server log records: telemetry.commit).

decode tps is token-weighted over the requests' decode windows (tokens after each request's
first read that carried tokens over the time from that read to its last token-bearing chunk,
`RequestTrace.decode_window`): chunking cannot move it, a client late for the first token does
not speed it up, and prefill never leaks into it.

Commit length (tokens per verify step over ALL steps, drafted or not) has ONE precedence; the
first that applies wins and `mean_commit_len_source` names it:
1. `client`: the client's step reconstruction, when it is reliable for every request. It sees
   every step, drafted or not; on vLLM it equalled the server's all-steps counters exactly, while
   the server's per-step lists left out the steps that drafted nothing. Not where the
   server-wide counters (2) counted more steps than the stream's events held, these requests
   alone in them: its events merged steps (a stream that fell behind), which a note says.
2. `prometheus`: server all-steps counters over the run (vLLM inter-token-latency count and
   generation tokens: (tokens - requests) / steps).
3. `server`: per-request server figures, each request's own client steps where those are reliable
   and its server fields otherwise: per-step lists only after the cross-check with the stream
   (analysis.server_steps) showed what they cover, drafted-steps-only counts turned into all-steps
   ones with the stream's token count.
4. `client` over the requests whose steps are reliable, when some are not and no server data
   covers the rest (a note says how many).
5. `log`: server log records (per-step records of these requests, else all-steps summaries).
Where the measuring client was the limit (analysis/client_health.py: its loop answered late, so
one read could hold several steps) and the commit length came from its steps, `prometheus`
comes first (`guarded_headline`, what probe and diagnose call), with a note.
A drafted-steps-only figure (vLLM `mean_acceptance_length`, llama.cpp `mean len`, the
`SpecDecoding metrics:` line, `1 + accepted / drafts`) is never `mean_commit_len`: it is
`mean_commit_len_per_drafted_step`, beside `drafted_step_share` (share of steps that drafted).

Mean step time is `mean_commit_len / decode_tps`, so that tps = L / s holds exactly; its source is
`client` where the client's steps were timed by the client (then it is their measured mean),
else `derived`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from specscope.analysis.client_health import ClientHealth, client_health, median_step_s
from specscope.analysis.fits.acceptance import ServerAcceptance, from_telemetry
from specscope.analysis.headline.decompose import Decomposition
from specscope.analysis.headline.loops import LoopReading, loop_reading
from specscope.analysis.headline.uncertainty import (
    Interval95,
    median_interval,
    totals_intervals,
    unit_rows,
)
from specscope.analysis.steps.reconstruct import StepReconstruction
from specscope.analysis.steps.server import (
    DISAGREEMENT,
    DRAFTED_STEPS,
    EVERY_STEP,
    ServerCommit,
    server_commit,
    stream_decode_tokens,
)
from specscope.telemetry.records import SpecRecord
from specscope.trace.model import RequestTrace

CLIENT, PROMETHEUS, SERVER, LOG = "client", "prometheus", "server", "log"


@dataclass(frozen=True)
class Headline:
    """The headline of one set of requests (the main measurement of a run)."""

    requests: int  # requests with a decode window
    decode_tps: float | None = None
    decode_tps_ci: Interval95 | None = None
    mean_commit_len: float | None = None
    mean_commit_len_source: str | None = None  # client | prometheus | server | log | None
    commit_len_detail: str = ""  # the source in words, e.g. "client chunks (full_generation)"
    mean_commit_len_ci: Interval95 | None = None
    mean_commit_len_per_drafted_step: float | None = None
    per_drafted_step_source: str | None = None
    drafted_step_share: float | None = None
    share_counts: tuple[float, float] | None = None  # (steps that drafted, steps) behind the share
    share_source: str | None = None
    mean_step_s: float | None = None
    mean_step_s_source: str | None = None  # client | derived | None
    mean_step_s_ci: Interval95 | None = None
    ttft_s: float | None = None  # median over the requests
    ttft_s_ci: Interval95 | None = None
    tokens: float = 0.0  # decode-window totals
    seconds: float = 0.0
    # (tokens, steps, seconds) per resampling unit of the commit-length source, for the
    # baseline split's interval; None where the source is run-level (no per-unit steps)
    rows: np.ndarray | None = field(default=None, compare=False)
    unit: str = "request"
    notes: tuple[str, ...] = ()
    # of the notes, those where the client's figure and the server's disagree (the verdict
    # says the first: it changes how the commit length reads)
    disagreements: tuple[str, ...] = ()
    # the requests behind the commit length that end in a repetition loop (None: none does)
    loops: LoopReading | None = None
    # share of the decode tokens that came in a first read beside the first token: their steps
    # are unseen, and every figure above is over the rest of each generation
    first_read_share: float = 0.0
    # the engine's own mean step time over the same requests (vLLM's inter-token latency, engine
    # timestamps, run delta), and how much longer the stream took a step than the engine:
    # above DELIVERY_NOTE_SHARE the server's front end or this client was the limit
    server_step_s: float | None = None
    delivery_lag_share: float | None = None

    @property
    def decomposition(self) -> Decomposition | None:
        """tokens / steps / seconds with the identity tps = L / s, None without L."""
        if not self.mean_commit_len or self.seconds <= 0:
            return None
        return Decomposition(self.tokens, self.tokens / self.mean_commit_len, self.seconds)

    def json_fields(self) -> dict[str, object]:
        """The contract's keys (probe `summary.*`, diagnose top level)."""

        def ci(v: Interval95 | None) -> list[float] | None:
            return None if v is None else v.as_list()

        return {
            "decode_tps": self.decode_tps,
            "decode_tps_ci": ci(self.decode_tps_ci),
            "mean_commit_len": self.mean_commit_len,
            "mean_commit_len_source": self.mean_commit_len_source,
            "mean_commit_len_ci": ci(self.mean_commit_len_ci),
            "mean_commit_len_per_drafted_step": self.mean_commit_len_per_drafted_step,
            "drafted_step_share": self.drafted_step_share,
            "mean_step_s": self.mean_step_s,
            "mean_step_s_source": self.mean_step_s_source,
            "mean_step_s_ci": ci(self.mean_step_s_ci),
            "ttft_s_ci": ci(self.ttft_s_ci),
            "interval_method": self.interval_method,
            "headline_loops": None if self.loops is None else self.loops.to_json(),
            "first_read_share": self.first_read_share,
            "server_step_s": self.server_step_s,
            "delivery_lag_share": self.delivery_lag_share,
        }

    @property
    def interval_method(self) -> str | None:
        for v in (self.mean_commit_len_ci, self.decode_tps_ci, self.ttft_s_ci):
            if v is not None:
                return v.method
        return None


@dataclass(frozen=True)
class _Request:
    trace: RequestTrace
    rec: StepReconstruction
    window: tuple[int, float]
    server: ServerCommit | None

    @property
    def client_ok(self) -> bool:
        """The client's own all-steps reconstruction is reliable (a server list that replaced
        it counts only where the client's steps agreed with it), and holds as many steps as
        the server counted."""
        r = self.rec
        if not (r.reliable and r.steps) or self.client_merges_steps:
            return False
        return r.method != "server" or bool(r.server_check and r.server_check.client_agrees)

    @property
    def client_merges_steps(self) -> bool:
        """The server counted more verify steps than the client's steps can hold: each token
        of the stream the client's steps leave out (its first read) is at most one step, so
        fewer client steps than the server's count less those tokens means some event carried
        several steps (vLLM merges the outputs its stream has not sent yet when its consumer
        falls behind: 60 client steps for vLLM's 73 on a loaded machine, commit length +9%).
        A step of slack and 2% for all-steps figures given as a mean (tokens / mean)."""
        if self.server is None or not self.rec.steps:
            return False
        return _merged(len(self.rec.steps), self.hidden_tokens, self.server.steps)

    @property
    def hidden_tokens(self) -> int:
        """Stream tokens the client's steps leave out (its first read): each at most one step."""
        return max(stream_decode_tokens(self.trace) - self.rec.total_commit, 0)


def _merged(client_steps: int, hidden_tokens: int, server_steps: float) -> bool:
    """Fewer client steps than the server counted, less one step per token they leave out,
    a step of slack and 2% (all-steps figures given as a mean): some event held several steps."""
    return client_steps < server_steps - hidden_tokens - max(1.0, 0.02 * server_steps)


class _Counters(NamedTuple):
    """vLLM's all-steps counters over the run (its Prometheus run delta)."""

    commit_len: float  # (generation tokens - requests) / steps
    steps: float
    drafted_share: float | None
    source: str
    requests: float  # requests that finished within the delta
    step_s: float | None  # inter-token latency sum / count: the engine's own step timing


def _prometheus(records: Sequence[SpecRecord]) -> _Counters | None:
    """vLLM's all-steps counters from the first Prometheus run delta that has them."""
    for r in records:
        if r.format != "prometheus" or r.scope != "run_delta":
            continue
        d = r.fields.get("delta")
        if not isinstance(d, dict):
            continue
        steps, tokens, reqs = (
            d.get("itl_count"),
            d.get("generation_tokens"),
            d.get("finished_requests"),
        )
        if not (steps and tokens and reqs) or tokens - reqs <= 0:
            continue
        share = (
            d["drafts"] / steps if d.get("drafts") is not None and steps >= d["drafts"] else None
        )
        itl_sum = d.get("itl_sum")
        return _Counters(
            commit_len=(tokens - reqs) / steps,
            steps=float(steps),
            drafted_share=share,
            source=(
                "Prometheus vllm:inter_token_latency_seconds_count and generation_tokens (run "
                "delta, server-wide)"
            ),
            requests=float(reqs),
            step_s=itl_sum / steps if itl_sum and itl_sum > 0 else None,
        )
    return None


def _chunk_rows(reqs: Sequence[_Request]) -> tuple[np.ndarray, str]:
    """(tokens, chunks, seconds) units over each request's decode window (its token-bearing
    chunks after the first read): cut into requests or blocks of consecutive chunks, whatever
    the steps are."""
    k: list[float] = []
    s: list[float] = []
    rid: list[int] = []
    for q in reqs:
        for (t_a, _), (t_b, n_b) in itertools.pairwise(q.trace.decode_events()):
            k.append(float(n_b))
            s.append((t_b - t_a) / 1e9)
            rid.append(q.trace.index)
    return unit_rows(k, s, rid)


def _client_rows(reqs: Sequence[_Request]) -> tuple[np.ndarray, str]:
    steps = [st for q in reqs for st in q.rec.steps]
    return unit_rows(
        [st.commit_len for st in steps],
        [st.step_s for st in steps],
        [q.trace.index for q in reqs for _ in q.rec.steps],
    )


def _drafted(
    reqs: Sequence[_Request], telemetry: ServerAcceptance | None
) -> tuple[float | None, str | None, tuple[float, float] | None]:
    """(per-drafted-step commit length, its source, (drafted steps, steps)) from what the server
    said per request, else the figure from its log/counter summaries."""
    per_tok = per_n = share_d = share_n = 0.0
    sources: set[str] = set()
    for q in reqs:
        chk = q.rec.server_check
        sc = q.server
        if chk is not None and chk.covers == DRAFTED_STEPS:
            share_d += chk.drafted_steps
            share_n += chk.all_steps
            if chk.commits:
                per_tok += sum(chk.commits)
                per_n += chk.drafted_steps
                sources.add(f"{q.trace.server_spec.source or 'server'} per-step list")
        elif chk is not None and chk.covers == EVERY_STEP:
            drafted = q.trace.server_spec.per_step_drafted  # type: ignore[union-attr]
            if drafted and len(drafted) == chk.all_steps:
                share_d += sum(1 for d in drafted if d > 0)
                share_n += chk.all_steps
        elif sc is not None and sc.per_drafted_step and sc.drafted_steps:
            per_tok += sc.per_drafted_step * sc.drafted_steps
            per_n += sc.drafted_steps
            share_d += sc.drafted_steps
            share_n += sc.steps
            sources.add(sc.source)
    per = per_tok / per_n if per_n else None
    src = ", ".join(sorted(sources)) if per is not None else None
    if per is None and telemetry is not None and telemetry.per_drafted_step:
        per, src = telemetry.mean_commit_len, telemetry.source
    return per, src, ((share_d, share_n) if share_n else None)


def _commit_source(
    reqs: list[_Request],
    prom: _Counters | None,
    server_log: ServerAcceptance | None,
    label: str,
    notes: list[str],
    client_limited: bool = False,
) -> tuple[float | None, str | None, str, list[_Request], bool]:
    """(run-level L, source, detail, covered requests, timed by the client): the commit
    length's one precedence (the module docstring), so that every command reads one figure;
    with `client_limited` the server's all-steps counters come before the client's steps."""
    if client_limited and prom is not None:
        notes.append(
            "the measuring client was the limit (its loop answered late, so a read could hold "
            "several steps): commit length from the server's all-steps counters, not its steps"
        )
        return prom.commit_len, PROMETHEUS, prom.source, [], False
    source: str | None = None
    detail = ""
    L: float | None = None
    covered: list[_Request] = []
    timed = False
    client = [q for q in reqs if q.client_ok]
    mixed = [q for q in reqs if q.client_ok or q.server is not None]
    if merging := sum(q.client_merges_steps for q in reqs):
        notes.append(
            f"{merging} of {len(reqs)} request(s) streamed events that merged verify steps (the "
            "server counted more steps than the client saw): their commit length is the server's"
        )
    if len(client) == len(reqs) and (merged := _merged_server_wide(client, prom)):
        notes.append(
            f"the server counted {merged[1]:.0f} verify steps where the stream's events held "
            f"{merged[0]}: events merged steps (a stream that falls behind sends several steps' "
            "tokens at once), so the commit length is the server's all-steps counters' and the "
            "client's timings are the delivery's"
        )
        return prom.commit_len, PROMETHEUS, prom.source, [], False  # type: ignore[union-attr]
    if len(client) == len(reqs):
        covered, source = client, CLIENT
        methods = sorted({q.rec.method for q in client})
        detail = f"client {'/'.join(methods)} steps ({label})"
        timed = all(q.rec.timed_by_client for q in client)
    elif prom is not None:
        L, source, detail = prom.commit_len, PROMETHEUS, prom.source
    elif len(mixed) == len(reqs):
        covered, source = mixed, SERVER
        used = sorted({q.server.source for q in mixed if not q.client_ok and q.server})
        detail = f"server per-request fields ({', '.join(used)}; {label})"
        if len(client):
            detail += f"; client steps for {len(client)} of {len(reqs)} requests"
    elif client:
        covered, source = client, CLIENT
        detail = f"client steps ({label}; {len(client)} of {len(reqs)} requests reliable)"
        notes.append(
            f"commit length from the {len(client)} of {len(reqs)} requests whose client steps "
            "are reliable; the others have no usable server figure"
        )
        timed = all(q.rec.timed_by_client for q in client)
    else:
        log_l, log_src = _log_commit(reqs, server_log)
        if log_l is not None:
            L, source, detail = log_l, LOG, log_src
    return L, source, detail, covered, timed


def _merged_server_wide(
    reqs: Sequence[_Request], prom: _Counters | None
) -> tuple[int, float] | None:
    """(client steps, server steps) where the server-wide counters counted more verify steps
    than the client's steps can hold (`_merged`, as `_Request.client_merges_steps` per
    request), for a server that counts no request apart (vLLM's Prometheus: 76 client steps
    for its 84 under a loaded test suite, commit length +3.5%). None where they agree, or where
    the counters also hold requests that are not these."""
    if prom is None or round(prom.requests) != len(reqs):
        return None
    seen = sum(len(q.rec.steps) for q in reqs)
    if _merged(seen, sum(q.hidden_tokens for q in reqs), prom.steps):
        return seen, prom.steps
    return None


def _own_commit(q: _Request) -> tuple[float, float] | None:
    """(tokens, steps) of one request as the commit length counts it: its client steps where
    reliable, else its server figure; None with neither."""
    if q.client_ok:
        return float(q.rec.total_commit), float(len(q.rec.steps))
    if q.server is not None:
        return float(q.server.tokens), float(q.server.steps)
    return None


def _loops(
    reqs: Sequence[_Request], covered: Sequence[_Request], L: float | None, notes: list[str]
) -> LoopReading | None:
    """The loops among the requests behind the commit length (the covered ones, else all of
    them for a run-level source, which has no per-request figure), its note onto `notes` when
    loops dominate: the reader sees it beside the figure it qualifies."""
    members = [(q.trace, _own_commit(q)) for q in covered] or [(q.trace, None) for q in reqs]
    loops = loop_reading(members, L)
    if loops is not None and loops.note:
        notes.append(loops.note)
    return loops


def _covered_commit(
    covered: list[_Request], source: str | None, timed: bool, every: bool, seed: int
) -> tuple[float | None, np.ndarray, str, Interval95 | None, Interval95 | None]:
    """(L, rows, unit, its interval, the step time's): the commit length over the covered
    requests' own steps, with the units its bootstrap resamples; the step time's interval only
    where the client timed the steps of every request (`every`): else it is derived."""
    c_tokens = c_steps = 0.0
    for q in covered:
        tokens, steps = _own_commit(q) or (0.0, 0.0)
        c_tokens += tokens
        c_steps += steps
    L = c_tokens / c_steps if c_steps else None
    if source == CLIENT and timed:
        rows, unit = _client_rows(covered)
    else:
        rows = np.asarray(
            [
                (q.rec.total_commit, len(q.rec.steps), q.window[1])
                if q.client_ok
                else (q.server.tokens, q.server.steps, q.window[1])  # type: ignore[union-attr]
                for q in covered
            ],
            dtype=float,
        ).reshape(-1, 3)
        unit = "request"
    cis = totals_intervals(rows, unit, seed=seed) or {}
    commit_ci = cis.get("mean_commit_len")
    step_ci = cis.get("mean_step_s") if every else None
    return L, rows, unit, commit_ci, step_ci


def _drafted_share(
    reqs: Sequence[_Request], server_log: ServerAcceptance | None, prom: _Counters | None
) -> tuple[float | None, str | None, tuple[float, float] | None, float | None, str | None]:
    """(per drafted step, its source, share counts, drafted share, its source): the
    drafted-steps-only figures, kept apart from the all-steps commit length."""
    per_drafted, per_src, counts = _drafted(reqs, server_log)
    share = counts[0] / counts[1] if counts else None
    share_src = "server per-request fields and the stream" if counts else None
    if share is None and prom is not None and prom.drafted_share is not None:
        share, share_src = prom.drafted_share, prom.source
    return per_drafted, per_src, counts, share, share_src


def _run_level_rows(reqs: Sequence[_Request], L: float) -> np.ndarray:
    """Run-level sources (counters, logs) give no per-request steps: each request's window at
    the run's commit length, so that a baseline split still resamples requests."""
    return np.asarray([(q.window[0], q.window[0] / L, q.window[1]) for q in reqs], dtype=float)


def _tps_and_step_ci(
    reqs: Sequence[_Request], L: float | None, step_ci: Interval95 | None, seed: int
) -> tuple[Interval95 | None, Interval95 | None]:
    """decode tps's interval over chunk units (whatever the steps are), and the step time's
    carried over from it where the steps gave none."""
    chunk_rows, chunk_unit = _chunk_rows(reqs)
    tps_ci = (totals_intervals(chunk_rows, chunk_unit, seed=seed) or {}).get("decode_tps")
    if step_ci is None and L and tps_ci is not None:
        # s = L / tps: the interval of tps carries over (L's own uncertainty is in its interval)
        step_ci = Interval95(L / tps_ci.high, L / tps_ci.low, tps_ci.method + " (L / tps)")
    return tps_ci, step_ci


def _requests(
    traces: Sequence[RequestTrace], reconstructions: Sequence[StepReconstruction]
) -> list[_Request]:
    """The requests that have a decode window, with what the headline reads of each (the
    callers pass the requests to measure: finished ones, and a main generation cut short by
    Ctrl-C, whose streamed part is as real as a finished one's)."""
    reqs: list[_Request] = []
    for t, r in zip(traces, reconstructions, strict=True):
        w = t.decode_window()
        if w is not None:
            reqs.append(_Request(t, r, w, server_commit(t, r.server_check)))
    return reqs


def headline(
    traces: Sequence[RequestTrace],
    reconstructions: Sequence[StepReconstruction],
    *,
    telemetry: Sequence[SpecRecord] | None = None,
    label: str = "all requests",
    seed: int = 0,
    client_limited: bool = False,
) -> Headline:
    """The headline over these (successful) requests and their reconstructions (aligned).
    `telemetry`: server records about the same run (Prometheus deltas, log records);
    `client_limited`: the client was the limit (guarded_headline), so its steps come after the
    server's all-steps counters."""
    reqs = _requests(traces, reconstructions)
    ttft, ttft_ci = _ttft(traces, seed)
    if not reqs:
        return Headline(requests=0, ttft_s=ttft, ttft_s_ci=ttft_ci)
    tokens, seconds = (float(sum(q.window[i] for q in reqs)) for i in (0, 1))
    tps = tokens / seconds
    records = list(telemetry or [])
    server_log = from_telemetry(records) if records else None
    notes: list[str] = []
    rows, unit = None, "request"
    prom = _prometheus(records)
    L, source, detail, covered, timed = _commit_source(
        reqs, prom, server_log, label, notes, client_limited
    )
    every = source == CLIENT and timed and len(covered) == len(reqs)
    commit_ci = step_ci = None
    if covered:
        L, rows, unit, commit_ci, step_ci = _covered_commit(covered, source, timed, every, seed)
    if rows is None and L:
        rows, unit = _run_level_rows(reqs, L), "request"
    tps_ci, step_ci = _tps_and_step_ci(reqs, L, step_ci, seed)
    per_drafted, per_src, counts, share, share_src = _drafted_share(reqs, server_log, prom)
    notes += (disagreements := _cross_checks(L, source, label, reqs, server_log, prom))
    loops = _loops(reqs, covered, L, notes)
    first_read = _first_read_share(reqs, notes)
    step = L / tps if L else None
    server_step, lag = _delivery(reqs, prom, step, notes)
    return Headline(
        requests=len(reqs),
        decode_tps=tps,
        decode_tps_ci=tps_ci,
        mean_commit_len=L,
        mean_commit_len_source=source,
        commit_len_detail=detail,
        mean_commit_len_ci=commit_ci,
        mean_commit_len_per_drafted_step=per_drafted,
        per_drafted_step_source=per_src,
        drafted_step_share=share,
        share_counts=counts,
        share_source=share_src,
        mean_step_s=step,
        mean_step_s_source=None if step is None else (CLIENT if every else "derived"),
        mean_step_s_ci=step_ci,
        ttft_s=ttft,
        ttft_s_ci=ttft_ci,
        tokens=tokens,
        seconds=seconds,
        rows=rows,
        unit=unit,
        notes=tuple(notes),
        disagreements=tuple(disagreements),
        loops=loops,
        first_read_share=first_read,
        server_step_s=server_step,
        delivery_lag_share=lag,
    )


def guarded_headline(
    traces: Sequence[RequestTrace],
    reconstructions: Sequence[StepReconstruction],
    client_records: Sequence[Mapping[str, Any]],
    *,
    telemetry: Sequence[SpecRecord] | None = None,
    label: str = "all requests",
    seed: int = 0,
) -> tuple[Headline, ClientHealth | None]:
    """The headline and the client's health against its median step (client_health.py). A
    client that was the limit reads late, and a late read can hold several steps: under load
    vLLM's n-gram commit length of 1.85 was read as 2.1 from the client's steps. Where that
    was the headline's source and the server's all-steps counters are there, they decide it
    (and where they decided it already, its events having merged steps, the limit is the
    reason the headline gives)."""
    head = headline(traces, reconstructions, telemetry=telemetry, label=label, seed=seed)
    timed = [s.step_s for r in reconstructions if r.reliable for s in r.steps if s.step_s > 0]
    health = client_health(client_records, traces, median_step_s(timed, head.mean_step_s))
    limited = health is not None and health.limits_step_time
    if (
        limited
        and head.mean_commit_len_source in (CLIENT, PROMETHEUS)
        and _prometheus(telemetry or [])
    ):
        head = headline(
            traces,
            reconstructions,
            telemetry=telemetry,
            label=label,
            seed=seed,
            client_limited=True,
        )
    return head, health


def _ttft(traces: Sequence[RequestTrace], seed: int) -> tuple[float | None, Interval95 | None]:
    """The median TTFT of the requests measured (see `_requests`) and its interval."""
    ttfts = [v for t in traces if (v := t.ttft_s) is not None]
    return (float(np.median(ttfts)) if ttfts else None), median_interval(ttfts, seed=seed)


# Above this share of the decode tokens arriving with the first token, the figures are said to
# leave out the start of the generations (one token in 50: a 256-token run's first read held
# five or more tokens beside the first).
FIRST_READ_NOTE_SHARE = 0.02


def _first_read_share(reqs: Sequence[_Request], notes: list[str]) -> float:
    """The share of the decode tokens that came in a first read with the first token, and its
    note onto `notes` when it is large enough to move the figures. Those tokens' steps are
    unseen (one read, one timestamp), so tokens per step, step time and decode tps are over
    the rest of each generation; and the start of a generation is where it differs from the rest
    (an n-gram drafter finds nothing to copy yet: on a loaded machine against vLLM, 12 tokens
    in two first reads moved the commit length from vLLM's 1.80 to 1.97)."""
    total = sum(stream_decode_tokens(q.trace) for q in reqs)
    unseen = [max(stream_decode_tokens(q.trace) - q.window[0], 0) for q in reqs]
    share = sum(unseen) / total if total else 0.0
    if share > FIRST_READ_NOTE_SHARE:
        late = sum(1 for n in unseen if n > 0)
        notes.append(
            f"the first read of {late} of {len(reqs)} request(s) held {sum(unseen)} tokens beside "
            f"the first ({share:.0%} of the decode tokens): their steps are unseen, so tokens per "
            "step, step time and decode tps are over the rest of each generation (the server or "
            "this client was late at the start)"
        )
    return share


# Above this, the stream took a step longer than the engine ran one, and the headline says so:
# with the stream keeping up, the client's step time was within 2% of vLLM's engine-timed one
# (tests/test_peer_vllm.py); a starved front end (two cores under a test suite) delivered each
# step 8% later than its engine ran it, with no step merged.
DELIVERY_NOTE_SHARE = 0.02


def _delivery(
    reqs: Sequence[_Request], prom: _Counters | None, step: float | None, notes: list[str]
) -> tuple[float | None, float | None]:
    """(the engine's mean step time, the stream's lag behind it as a share), when the server
    timed its own steps over exactly these requests (vLLM's inter-token latency histogram: one
    observation per step, engine-core timestamps); its note onto `notes` above
    DELIVERY_NOTE_SHARE. A client times steps at the socket: when vLLM's API server (output
    processing, detokenization, SSE) or this client cannot keep up with the engine, every step
    arrives a little later than the last, no event merges, and the client's step time is the
    delivery's, not the engine's."""
    if prom is None or prom.step_s is None or not step or prom.requests != len(reqs):
        return None, None
    lag = step / prom.step_s - 1
    if lag > DELIVERY_NOTE_SHARE:
        notes.append(
            f"the stream delivered a step every {step * 1e3:.1f} ms, the engine ran one every "
            f"{prom.step_s * 1e3:.1f} ms (vLLM's inter-token latency, engine timestamps): "
            f"delivery was {lag:.0%} slower, so the server's front end (output processing, "
            "detokenization, streaming) or this client was the limit, and the step time and "
            "decode tps here are the delivered ones"
        )
    return prom.step_s, lag


def _log_commit(
    reqs: Sequence[_Request], server: ServerAcceptance | None
) -> tuple[float | None, str]:
    """Commit length from server log records: per-step records of these requests, else an
    all-steps summary over the log window (never a drafted-steps-only one)."""
    if server is None:
        return None, ""
    ids = {q.trace.request_id for q in reqs if q.trace.request_id}
    if server.per_step and ids & set(server.by_request):
        vals = [v for k, vs in server.by_request.items() if k in ids for v in vs]
        return float(np.mean(vals)), server.source
    if server.mean_commit_len and not server.per_drafted_step:
        return server.mean_commit_len, server.source + " (whole log window)"
    return None, ""


def _cross_checks(
    L: float | None,
    source: str | None,
    label: str,
    reqs: Sequence[_Request],
    server: ServerAcceptance | None,
    prom: _Counters | None,
) -> list[str]:
    """Where the chosen figure and other evidence disagree, say so, and say which is which."""
    notes: list[str] = []
    if not L or source != CLIENT:
        return notes
    if prom is not None and abs(prom.commit_len / L - 1) > DISAGREEMENT:
        notes.append(
            f"client steps say {L:.2f} tokens/step, {prom.source} {prom.commit_len:.2f}: the "
            f"counters are server-wide, so other traffic during the run or requests outside "
            f"{label} move them"
        )
    if server is None or not server.mean_commit_len:
        return notes
    ids = {q.trace.request_id for q in reqs if q.trace.request_id}
    if server.per_step and ids & set(server.by_request):
        vals = [v for k, vs in server.by_request.items() if k in ids for v in vs]
        srv = float(np.mean(vals))
        if abs(srv / L - 1) > DISAGREEMENT:
            notes.append(
                f"client steps say {L:.2f} tokens/step, server per-step records {srv:.2f}: "
                "chunks may merge or split steps"
            )
    elif abs(server.mean_commit_len / L - 1) > DISAGREEMENT:
        notes.append(
            f"server telemetry ({server.source}) says {server.mean_commit_len:.2f} tokens/step "
            f"over its window, the client {L:.2f} over {label}"
            + (
                " (the server's figure is per drafted step: it is higher wherever steps draft "
                "nothing, as n-gram lookup often does)"
                if server.per_drafted_step
                else ""
            )
        )
    return notes
