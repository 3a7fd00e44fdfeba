"""Server evidence for one run window: log files or a log command, and a Prometheus delta.

A run is measured first and saved; evidence is read after it, for the run's wall-clock window,
and every failure becomes a note (never a crash: the measurement is already on disk).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from specscope.telemetry.coverage import covered_share, wait_for_closing_interval
from specscope.telemetry.ingest import LogQuery, read_logs
from specscope.telemetry.prometheus import (
    MetricsError,
    MetricsSnapshot,
    fetch_metrics,
    metrics_delta,
    scrape_metrics,
)
from specscope.telemetry.records import SpecRecord
from specscope.telemetry.sources import DEFAULT_COMMAND_TIMEOUT_S, SourceError

# Server logs are read for the run's wall-clock window widened by this much on each side
# (log timestamps have second resolution and clocks on one host agree to well under this).
LOG_WINDOW_SLACK_S = 2.0

# vLLM records a request's stats (its finished count, its steps' inter-token latencies) after
# its last token is on the wire: the scrape after a run is repeated, every METRICS_SETTLE_POLL_S
# for at most METRICS_SETTLE_S, until the server counts the run's finished requests.
METRICS_SETTLE_S = 5.0
METRICS_SETTLE_POLL_S = 0.1


@dataclass(frozen=True)
class EvidenceSources:
    """Where the server's own account of the run is read (the --logs, --logs-cmd,
    --logs-timeout and --metrics-url flags)."""

    logs: tuple[str, ...] = ()
    logs_cmd: str | None = None  # one command line, run without a shell
    logs_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S
    metrics_url: str | None = None


@dataclass(frozen=True)
class ServerEvidence:
    """What was read: records for analysis, notes for the report, and (when logs were read)
    how well interval records cover the run window (RunInfo.telemetry)."""

    records: list[SpecRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    log_window: dict[str, Any] | None = None


MetricsBefore = MetricsSnapshot | MetricsError | None


async def scrape_before(url: str | None) -> MetricsBefore:
    """A Prometheus scrape before the run: None without a URL, the error when it fails
    (reported in the notes after the run; a run is not stopped for it)."""
    if not url:
        return None
    try:
        return await fetch_metrics(url)
    except MetricsError as e:
        return e


def _log_evidence(sources: EvidenceSources, started_unix: float, run_end: float) -> ServerEvidence:
    query = LogQuery(
        paths=list(sources.logs),
        logs_cmd=sources.logs_cmd,
        command_timeout_s=sources.logs_timeout_s,
        since=started_unix - LOG_WINDOW_SLACK_S,
        until=run_end + LOG_WINDOW_SLACK_S,
        keep_records=True,
    )
    what = ", ".join([*query.paths, *([query.logs_cmd] if query.logs_cmd else [])])
    try:
        res = read_logs(query)
        # Interval formats log the run's last interval after it ends: wait for it (bounded).
        waited = wait_for_closing_interval(query.paths, res.records, run_end)
        if waited > 0:
            query.until = time.time() + LOG_WINDOW_SLACK_S
            res = read_logs(query)
    except (SourceError, OSError, ValueError) as e:
        return ServerEvidence(notes=[f"server logs ({what}) not read: {e}"])
    s = res.summary
    coverage = covered_share(res.records, started_unix, run_end)
    note = (
        f"server logs ({what}): {len(res.records)} speculation records in the run "
        f"window; {s.malformed} malformed line(s)"
        + (f"; waited {waited:.1f} s for the closing interval" if waited else "")
        + ("" if coverage is None else f"; interval records cover {coverage:.0%} of the run window")
    )
    return ServerEvidence(
        records=list(res.records),
        notes=[note, *(f"server logs: {w}" for w in s.warnings[:5])],
        log_window={
            "log_coverage": coverage,
            "log_wait_s": round(waited, 2),
            "log_records": len(res.records),
        },
    )


def _metrics_evidence(url: str, before: MetricsBefore, finished: int | None) -> ServerEvidence:
    if before is None or isinstance(before, Exception):
        return ServerEvidence(
            notes=[f"metrics {url}: no scrape before the run ({before}); no delta"]
        )
    try:
        after, waited = _settled_scrape(url, before, finished)
        recs = metrics_delta(before, after)
    except MetricsError as e:
        return ServerEvidence(notes=[f"metrics {url}: scrape after the run failed ({e})"])
    counted = _finished_delta(before, after)
    settle = ""
    if waited > 0 and finished is not None and counted is not None:
        short = counted < finished
        settle = (
            f"; the server counted {counted:g} of the run's {finished} finished requests "
            f"after {waited:.1f} s" + (" (its counters are short of the run)" if short else "")
        )
    return ServerEvidence(
        records=recs,
        notes=[
            f"metrics {url}: {len(recs)} run-scoped delta record(s) "
            "(server-wide counters: other traffic is included)" + settle
        ],
    )


def _finished_delta(before: MetricsSnapshot, after: MetricsSnapshot) -> float | None:
    """Requests the server counted as finished between the scrapes (vLLM), else None (also
    where the counter went down: a restarted server, which metrics_delta gives no delta)."""
    key = "finished_requests"
    if key not in before.counters or key not in after.counters:
        return None
    counted = after.counters[key] - before.counters[key]
    return counted if counted >= 0 else None


def _settled_scrape(
    url: str, before: MetricsSnapshot, finished: int | None
) -> tuple[MetricsSnapshot, float]:
    """The scrape after the run, and how long it waited for the server's counters to count
    the run's `finished` requests (seen: the probe's scrape read vLLM's counters one request
    short under load, and the engine's step time went missing from the headline)."""
    t0 = time.monotonic()
    after, waited = scrape_metrics(url), 0.0
    while finished and waited < METRICS_SETTLE_S:
        counted = _finished_delta(before, after)
        if counted is None or counted >= finished:
            break
        time.sleep(METRICS_SETTLE_POLL_S)
        after, waited = scrape_metrics(url), time.monotonic() - t0
    return after, waited


def collect_evidence(
    sources: EvidenceSources,
    started_unix: float,
    metrics_before: MetricsBefore,
    finished: int | None = None,
) -> ServerEvidence:
    """The server's evidence for the window from `started_unix` to now; `finished`: the
    requests the run saw finish, which the server's counters are given time to count."""
    run_end = time.time()
    parts: list[ServerEvidence] = []
    if sources.logs or sources.logs_cmd:
        parts.append(_log_evidence(sources, started_unix, run_end))
    if sources.metrics_url:
        parts.append(_metrics_evidence(sources.metrics_url, metrics_before, finished))
    windows = [p.log_window for p in parts if p.log_window is not None]
    return ServerEvidence(
        records=[r for p in parts for r in p.records],
        notes=[n for p in parts for n in p.notes],
        log_window=windows[0] if windows else None,
    )
