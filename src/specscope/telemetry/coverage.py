"""How much of a run's time window the server's interval log records cover, and the bounded wait
for the interval that closes the run.

Some servers log speculation as periodic summaries, each over the interval that just ended (vLLM's
`SpecDecoding metrics:` every 10 s). The interval holding a run's last requests is written up to
one interval after they finish; read at once, the log misses it, so the run's end is not in the
evidence at all. `wait_for_closing_interval` watches the file's new bytes for that line (only for
an interval format, only in a file that is still being written, never longer than a bound), and
`covered_share` states the share of the run window the records cover, so that a reader knows
whether the log speaks for the whole run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from specscope.telemetry.ingest import parse_line
from specscope.telemetry.records import SpecRecord
from specscope.telemetry.vllm import MARKER as VLLM_SPEC_MARKER

# Seconds each record of an interval format covers, ending at its time stamp (vLLM's default
# VLLM_LOG_STATS_INTERVAL). Formats not listed here are not time-interval summaries.
INTERVAL_S: dict[str, float] = {"vllm_spec": 10.0}
_MARKERS: dict[str, str] = {"vllm_spec": VLLM_SPEC_MARKER}
# Log stamps have whole seconds: a line stamped t was written in [t, t + 1).
_STAMP_RESOLUTION_S = 1.0
MAX_WAIT_S = 12.0
POLL_S = 0.5


def _interval_records(records: Iterable[SpecRecord]) -> list[SpecRecord]:
    return [
        r for r in records if r.format in INTERVAL_S and r.scope == "interval" and r.ts is not None
    ]


def covered_share(records: Iterable[SpecRecord], start: float, end: float) -> float | None:
    """Share (0-1) of [start, end] inside some interval record's span; None without any.

    A record stamped t covers (t - L, t] for its format's interval L, t taken mid-second.
    """
    if end <= start:
        return None
    spans: list[tuple[float, float]] = []
    for r in _interval_records(records):
        stop = float(r.ts) + _STAMP_RESOLUTION_S / 2  # type: ignore[arg-type]
        lo, hi = max(start, stop - INTERVAL_S[r.format]), min(end, stop)
        if hi > lo:
            spans.append((lo, hi))
    if not spans and not _interval_records(records):
        return None
    covered, reach = 0.0, start
    for lo, hi in sorted(spans):
        lo = max(lo, reach)
        if hi > lo:
            covered += hi - lo
            reach = hi
    return covered / (end - start)


def _recent_lines_offset(path: Path, size: int, lookback: int = 1 << 16) -> int:
    """Where the last `lookback` bytes' first whole line starts: the closing line may have been
    written between the first read and this look, so recent lines are checked too."""
    if size <= lookback:
        return 0
    with path.open("rb") as f:
        f.seek(size - lookback)
        tail = f.read(lookback)
    nl = tail.find(b"\n")
    return size - lookback + nl + 1 if nl >= 0 else size


def _closing_line_in(path: Path, offset: int, fmt: str, run_end: float) -> tuple[bool, int]:
    """Whether bytes appended after `offset` hold a `fmt` record stamped at or after the run's
    end (to the stamp's resolution); also the offset of the last whole line read."""
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    cut = data.rfind(b"\n") + 1
    marker = _MARKERS[fmt].encode()
    for raw in data[:cut].splitlines():
        if marker not in raw:
            continue
        rec = parse_line(raw.decode("utf-8", "replace"), format_="auto")
        if (
            isinstance(rec, SpecRecord)
            and rec.format == fmt
            and rec.ts is not None
            and rec.ts + _STAMP_RESOLUTION_S > run_end
        ):
            return True, offset + cut
    return False, offset + cut


def wait_for_closing_interval(
    paths: Sequence[str],
    records: Sequence[SpecRecord],
    run_end: float,
    *,
    max_wait_s: float = MAX_WAIT_S,
    sleep=time.sleep,
    clock=time.time,
) -> float:
    """Wait (bounded) until each log file being written holds the interval line that closes the
    run; returns the seconds waited (0 when nothing needed waiting).

    Waits only when the records read so far are of an interval format, none of them closes the
    run yet, and the file changed within the last interval (a live server's log, not an archive).
    """
    interval = _interval_records(records)
    if not interval:
        return 0.0
    fmt = interval[-1].format
    length = INTERVAL_S[fmt]
    if max(float(r.ts) for r in interval) + _STAMP_RESOLUTION_S > run_end:  # type: ignore[arg-type]
        return 0.0
    now = clock()
    live: dict[Path, int] = {}
    for p in paths:
        path = Path(p)
        if p == "-" or not path.is_file():
            continue
        st = path.stat()
        if now - st.st_mtime <= length + 2 * _STAMP_RESOLUTION_S:
            live[path] = _recent_lines_offset(path, st.st_size)
    if not live:
        return 0.0
    started = clock()
    deadline = started + min(max_wait_s, max(0.0, run_end + length + 2.0 - started))
    while live and clock() < deadline:
        for path in list(live):
            try:
                done, live[path] = _closing_line_in(path, live[path], fmt, run_end)
            except OSError:
                done = True
            if done:
                del live[path]
        if live:
            sleep(POLL_S)
    return clock() - started
