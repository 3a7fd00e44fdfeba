"""specscope.telemetry: what servers say about speculation.

Public API (other layers call these; everything returns `SpecRecord`s or summaries of them):

- Logs: `read_logs(LogQuery(...)) -> LogResult` (files, .gz, stdin "-", `logs_cmd`; time window;
  rank filter; `keep_records=True` for the records themselves), `parse_text(text) -> LogResult`,
  `parse_line(line) -> SpecRecord | Malformed | None`; per-format parsers in `sglang`,
  `ddtree`, `vllm`, `llamacpp`, `custom`.
- Prometheus: `scrape_metrics(url)` (`fetch_metrics(url)` on an event loop),
  `parse_metrics_text(text)`, `metrics_delta(before, after)`.
- SGLang server info: `fetch_server_info(base_url)`, `parse_server_info(obj)` (scope lifetime).
- Per-request server fields: `parse_llamacpp_timings(obj)` (dict of SpecRecord fields).
- Evidence for a run window: `evidence.collect_evidence(sources, started_unix, before)`.
"""

from __future__ import annotations

from specscope.telemetry.ingest import LogQuery, LogResult, parse_line, parse_text, read_logs
from specscope.telemetry.llamacpp import parse_llamacpp_timings
from specscope.telemetry.prometheus import (
    MetricsError,
    MetricsSnapshot,
    fetch_metrics,
    metrics_delta,
    parse_metrics_text,
    scrape_metrics,
)
from specscope.telemetry.records import Malformed, SpecRecord, to_record
from specscope.telemetry.server_info import ServerInfoError, fetch_server_info, parse_server_info
from specscope.telemetry.sources import SourceError

__all__ = [
    "LogQuery",
    "LogResult",
    "Malformed",
    "MetricsError",
    "MetricsSnapshot",
    "ServerInfoError",
    "SourceError",
    "SpecRecord",
    "fetch_metrics",
    "fetch_server_info",
    "metrics_delta",
    "parse_line",
    "parse_llamacpp_timings",
    "parse_metrics_text",
    "parse_server_info",
    "parse_text",
    "read_logs",
    "scrape_metrics",
    "to_record",
]
