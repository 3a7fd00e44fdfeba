"""The passive readers: what the server says about itself, read as it comes and adding no
load. Prometheus counters scraped every window and differenced against the previous scrape
(telemetry.prometheus), and a log file tailed through the existing line parsers
(telemetry.ingest.parse_line), surviving rotation. Faults come back as (kind, message) pairs
for the loop to record; nothing here raises for the server's or the disk's faults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from specscope.telemetry.ingest import parse_line
from specscope.telemetry.prometheus import (
    MetricsError,
    MetricsSnapshot,
    fetch_metrics,
    metrics_delta,
)
from specscope.telemetry.records import SpecRecord

Fault = tuple[str, str]  # (kind, message)
READ_MAX = 4 << 20  # bytes read from the log per window (the rest next window)
LINE_MAX = 1 << 20  # a partial line longer than this is dropped, not kept growing


@dataclass
class MetricsWatcher:
    """Scrapes `url` once per window; each scrape's records are the delta since the one
    before. A counter that went down is a server restart: recorded, and the new scrape becomes
    the reference (the next window's delta is clean)."""

    url: str
    timeout_s: float = 5.0
    last: MetricsSnapshot | None = None

    async def read(self) -> tuple[list[SpecRecord], list[Fault]]:
        try:
            snap = await fetch_metrics(self.url, self.timeout_s)
        except MetricsError as e:
            return [], [("scrape_failed", str(e))]
        before, self.last = self.last, snap
        if before is None:
            return [], []
        faults: list[Fault] = []
        if any(snap.counters.get(k, v) < v for k, v in before.counters.items()):
            faults.append(("server_restart", f"{self.url}: counters went down (server restarted)"))
        records = [r for r in metrics_delta(before, snap) if r.scope != "run_delta" or not faults]
        return records, faults


@dataclass
class LogTail:
    """Follows a log file as `tail -F` does: new complete lines each read; a file replaced
    (another inode) or cut shorter (truncated) is read again from its start; a missing file
    is waited for (a rotation in progress), said once. As with `tail -F`, a file truncated and
    refilled past the old length between two reads is not seen to be truncated (its new start
    is lost): reads are once per window, so keep --interval below the log's rotation cadence."""

    path: Path
    _fd: int | None = None
    _inode: int | None = None
    _offset: int = 0
    _partial: bytes = b""
    _missing_said: bool = field(default=False)

    def read(self) -> tuple[list[SpecRecord], list[Fault]]:
        faults = self._follow()
        if self._fd is None:
            return [], faults
        data = os.pread(self._fd, READ_MAX, self._offset)
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > LINE_MAX:
            self._partial = b""
        records = []
        for raw in lines:
            rec = parse_line(raw.decode("utf-8", "replace"), source=str(self.path))
            if isinstance(rec, SpecRecord):
                records.append(rec)
        return records, faults

    def _follow(self) -> list[Fault]:
        """(Re)open the file when it appeared, was replaced or was truncated."""
        try:
            st = os.stat(self.path)
        except OSError:
            if self._missing_said:
                return []
            self._missing_said = True
            return [("log_missing", f"{self.path}: not there (rotation in progress?)")]
        self._missing_said = False
        rotated = self._inode is not None and st.st_ino != self._inode
        truncated = self._fd is not None and st.st_size < self._offset
        if self._fd is not None and not (rotated or truncated):
            return []
        self.close()
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
        except OSError as e:
            return [("log_unreadable", f"{self.path}: {e.strerror}")]
        first = self._inode is None
        self._inode, self._offset, self._partial = st.st_ino, 0, b""
        if first:  # start at the end: a watch reads what comes, not the file's history
            self._offset = st.st_size
            return []
        return [
            (
                "log_rotated",
                f"{self.path}: {'replaced' if rotated else 'truncated'}, reading it from its start",
            )
        ]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
