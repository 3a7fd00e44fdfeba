"""Interval log coverage and the bounded wait for the interval that closes a run (vLLM's
`SpecDecoding metrics:` lines cover the ~10 s before their stamp and arrive after the run)."""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime
from pathlib import Path

from specscope.telemetry.coverage import covered_share, wait_for_closing_interval
from specscope.telemetry.ingest import parse_text
from specscope.telemetry.records import SpecRecord


def _vllm_line(ts: float, accepted: int = 38) -> str:
    stamp = datetime.fromtimestamp(ts).strftime("%m-%d %H:%M:%S")
    return (
        f"(APIServer pid=7) INFO {stamp} [metrics.py:120] SpecDecoding metrics: Mean acceptance "
        f"length: 3.50, Accepted throughput: 3.80 tokens/s, Drafted throughput: 6.12 tokens/s, "
        f"Accepted: {accepted} tokens, Drafted: 61 tokens, Per-position acceptance rate: 0.791, "
        "0.667, 0.582, 0.464, Avg Draft acceptance rate: 62.6%\n"
    )


def _records(text: str) -> list[SpecRecord]:
    return parse_text(text).records


def test_coverage_is_the_share_of_the_run_window_inside_record_intervals() -> None:
    start = float(int(time.time()) - 100)
    # A stamp t (whole seconds) covers (t + 0.5 - 10, t + 0.5]: +10 and +20 cover (0.5, 20.5].
    recs = _records(_vllm_line(start + 10) + _vllm_line(start + 20))
    assert len(recs) == 2
    share = covered_share(recs, start, start + 30)
    assert share is not None and abs(share - 20 / 30) < 1e-9
    # Overlapping intervals are not counted twice: +10 and +15 cover (0.5, 15.5].
    share = covered_share(
        _records(_vllm_line(start + 10) + _vllm_line(start + 15)), start, start + 30
    )
    assert share is not None and abs(share - 15 / 30) < 1e-9
    # The line written after the run covers its tail: the window is covered from 0.5 s on.
    recs = _records(_vllm_line(start + 10) + _vllm_line(start + 20) + _vllm_line(start + 30))
    share = covered_share(recs, start, start + 30)
    assert share is not None and abs(share - 29.5 / 30) < 1e-9


def test_no_interval_records_means_no_coverage_figure() -> None:
    assert covered_share([], 0.0, 10.0) is None
    step = SpecRecord(format="ddtree", ts=5.0, commit_len=3.0, n_steps=1, scope="step")
    assert covered_share([step], 0.0, 10.0) is None


def test_waits_for_the_closing_line_of_a_live_log_then_stops(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    run_end = time.time()
    log.write_text(_vllm_line(run_end - 8))
    recs = _records(log.read_text())
    writer = threading.Timer(1.0, lambda: log.open("a").write(_vllm_line(run_end + 2)))
    writer.start()
    try:
        waited = wait_for_closing_interval([str(log)], recs, run_end, max_wait_s=8.0)
    finally:
        writer.cancel()
    assert 0.5 < waited < 6.0  # returned once the line was there, well before the bound
    assert covered_share(_records(log.read_text()), run_end - 5, run_end) == 1.0


def test_no_wait_for_archives_other_formats_or_a_run_already_closed(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    run_end = time.time()
    log.write_text(_vllm_line(run_end - 8))
    recs = _records(log.read_text())
    assert wait_for_closing_interval([str(log)], [], run_end) == 0.0  # nothing interval-based
    old = time.time() - 3600
    os.utime(log, (old, old))  # not being written: an archived log never gets a new line
    assert wait_for_closing_interval([str(log)], recs, run_end) == 0.0
    closed = _records(_vllm_line(run_end + 1))
    assert wait_for_closing_interval([str(log)], closed, run_end) == 0.0


def test_the_wait_is_bounded_when_the_line_never_comes(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    run_end = time.time()
    log.write_text(_vllm_line(run_end - 8))
    recs = _records(log.read_text())
    started = time.monotonic()
    waited = wait_for_closing_interval([str(log)], recs, run_end, max_wait_s=1.5)
    assert 1.4 < waited < 3.0 and time.monotonic() - started < 3.5
