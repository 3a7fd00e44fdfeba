"""Attach server telemetry records to the requests of a run.

Logs carry wall-clock stamps (often whole seconds: SGLang and journalctl print no fraction);
requests carry client perf-counter stamps, converted with `RunInfo.perf_ns_to_unix`. A record
belongs to a request when the format names the request (`request_id` equal to the trace's
`request_id`), else when its time falls in the request's window widened by `slack_s` (for the
log's stamp resolution and clock skew). With concurrent requests a time-only match can hit
several windows: such records are kept apart as `ambiguous` rather than guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from specscope.telemetry.records import SpecRecord
from specscope.trace.model import RequestTrace, RunInfo

DEFAULT_SLACK_S = 1.0


@dataclass
class RequestWindow:
    index: int
    request_id: str | None
    start: float  # unix seconds
    end: float


@dataclass
class Alignment:
    by_request: dict[int, list[SpecRecord]] = field(default_factory=dict)  # trace.index -> records
    ambiguous: list[SpecRecord] = field(default_factory=list)  # time matches several requests
    in_run: list[SpecRecord] = field(default_factory=list)  # inside the run's window
    outside: list[SpecRecord] = field(default_factory=list)  # outside it, or undated
    matched_by_id: int = 0


def request_windows(
    info: RunInfo, requests: Iterable[RequestTrace], slack_s: float = DEFAULT_SLACK_S
) -> list[RequestWindow]:
    """Each request's [send - slack, end + slack] in unix seconds (end = last chunk when the
    request has no end stamp, e.g. a failed one)."""
    out = []
    for r in requests:
        last = r.t_end_ns
        if last is None and r.chunks:
            last = r.chunks[-1].t_ns
        if last is None:
            last = r.t_send_ns
        out.append(
            RequestWindow(
                r.index,
                r.request_id,
                info.perf_ns_to_unix(r.t_send_ns) - slack_s,
                info.perf_ns_to_unix(last) + slack_s,
            )
        )
    return out


def records_in_window(
    records: Iterable[SpecRecord], start: float, end: float
) -> list[SpecRecord]:
    """Records stamped in [start, end]."""
    return [r for r in records if r.ts is not None and start <= r.ts <= end]


def align(
    records: Sequence[SpecRecord],
    info: RunInfo,
    requests: Sequence[RequestTrace],
    slack_s: float = DEFAULT_SLACK_S,
) -> Alignment:
    """Assign records to requests by id first, then by time window."""
    windows = request_windows(info, requests, slack_s)
    result = Alignment(by_request={w.index: [] for w in windows})
    by_id = {w.request_id: w.index for w in windows if w.request_id}
    if windows:
        run_start = min(w.start for w in windows)
        run_end = max(w.end for w in windows)
    else:
        run_start = info.started_unix - slack_s
        run_end = (info.ended_unix or info.started_unix) + slack_s
    for rec in records:
        inside = rec.ts is not None and run_start <= rec.ts <= run_end
        (result.in_run if inside else result.outside).append(rec)
        if rec.request_id is not None and rec.request_id in by_id:
            result.by_request[by_id[rec.request_id]].append(rec)
            result.matched_by_id += 1
            continue
        if rec.ts is None:
            continue
        hits = [w.index for w in windows if w.start <= rec.ts <= w.end]
        if len(hits) == 1:
            result.by_request[hits[0]].append(rec)
        elif len(hits) > 1:
            result.ambiguous.append(rec)
    return result
