"""The run directory keeps everything measured, even when the writer dies mid-run."""

from __future__ import annotations

import json

import pytest

from specscope.trace import (
    Chunk,
    ErrorInfo,
    RequestSpec,
    RequestTrace,
    RunDirWriter,
    RunInfo,
    load_run,
)
from specscope.trace.rundir import REQUESTS_JSONL, RunDirError, RunDirReader


def _trace(i: int, chunks: list[tuple[int, int]], error: ErrorInfo | None = None) -> RequestTrace:
    return RequestTrace(
        index=i,
        spec=RequestSpec(prompt="x", max_tokens=10, tag="probe"),
        t_send_ns=0,
        chunks=[Chunk(t_ns=t, n_tokens=n) for t, n in chunks],
        error=error,
        t_end_ns=chunks[-1][0] if chunks else 1,
    )


def test_round_trip_and_schema(tmp_path):
    with RunDirWriter(tmp_path / "r", RunInfo(kind="probe", endpoint="http://x")) as w:
        w.append_request(_trace(0, [(100_000_000, 1), (150_000_000, 3), (200_000_000, 2)]))
        w.append_request(
            _trace(1, [], ErrorInfo(kind="http_status", message="500", http_status=500))
        )
        w.append_telemetry([{"format": "ddtree", "commit_len": 3.0}])
    run = load_run(tmp_path / "r")
    assert run.info.status == "complete"
    assert [r.index for r in run.requests] == [0, 1]
    assert run.requests[1].error and run.requests[1].error.http_status == 500
    assert run.telemetry[0]["commit_len"] == 3.0
    for line in (tmp_path / "r" / "requests.jsonl").read_text().splitlines():
        assert json.loads(line)["schema"] == 1
    assert json.loads((tmp_path / "r" / "run.json").read_text())["schema"] == 1


def test_decode_window_excludes_first_chunk():
    t = _trace(0, [(100_000_000, 1), (150_000_000, 3), (200_000_000, 2)])
    assert t.ttft_s == pytest.approx(0.1)
    tokens, seconds = t.decode_window()
    assert tokens == 5 and seconds == pytest.approx(0.1)


def test_a_late_first_read_starts_the_decode_window_at_that_read():
    """Plain decoding at 40 ms a token, the client late for the first: tokens 1-3 in one read
    at 180 ms. Their times are unknown, so the window starts at the read and leaves them out;
    counting them as decoded after it read 60 tokens in 2.4 s instead of 61 in 2.44 s."""
    late = [(180_000_000, 1)] * 3 + [(180_000_000 + 40_000_000 * k, 1) for k in range(1, 61)]
    first_read, events = _trace(0, late).reads()[0], _trace(0, late).decode_events()
    before = sum(n for _, n in first_read)
    assert before == 3 and len(events) == 61 and events[0][0] == 180_000_000
    tokens, seconds = _trace(0, late).decode_window()
    assert tokens == 60 and seconds == pytest.approx(2.4) and tokens / seconds == pytest.approx(25)
    # on time, the first read is the first event alone: the window starts at it, as before
    on_time = [(100_000_000 + 40_000_000 * k, 1) for k in range(63)]
    assert _trace(0, on_time).reads()[0] == [(100_000_000, 1)]
    assert _trace(0, on_time).decode_window() == (62, pytest.approx(2.48))
    # one event that commits several tokens (a speculative step) is one read's one event
    assert _trace(0, [(100, 4), (200, 3)]).reads()[0] == [(100, 4)]
    # everything in one read: no window to time
    assert _trace(0, [(100, 1), (100, 1)]).decode_window() is None


def test_partial_run_with_cut_last_line(tmp_path):
    w = RunDirWriter(tmp_path / "r", RunInfo(kind="probe"))
    w.append_request(_trace(0, [(1, 1), (2, 1)]))
    with (w.path / REQUESTS_JSONL).open("a", encoding="utf-8") as f:
        f.write('{"index": 1, "spec": {"prom')  # the process died mid-line
    run = load_run(tmp_path / "r")
    assert run.info.status == "partial"
    assert len(run.requests) == 1
    assert run.malformed_lines == 1


def test_keyboard_interrupt_marks_partial(tmp_path):
    with pytest.raises(KeyboardInterrupt), RunDirWriter(tmp_path / "r", RunInfo(kind="probe")) as w:
        w.append_request(_trace(0, [(1, 1), (2, 1)]))
        raise KeyboardInterrupt
    run = load_run(tmp_path / "r")
    assert run.info.status == "partial" and "Ctrl-C" in run.info.status_reason
    assert len(run.requests) == 1


def test_missing_and_non_run_dirs(tmp_path):
    with pytest.raises(RunDirError, match="not found"):
        RunDirReader(tmp_path / "nope")
    with pytest.raises(RunDirError, match="not a specscope run"):
        RunDirReader(tmp_path)
