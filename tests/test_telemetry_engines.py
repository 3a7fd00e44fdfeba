"""The fast engines give the general parser's answer exactly.

Production scanning takes three shortcuts: all markers found in one Aho-Corasick pass
(markers.py), the canonical DDTREE lines counted by one regex without building records
(fastpath.py), and files read as newline-aligned positioned reads (sources.py). The reference here is
the general path the fast ones replaced: one `bytes.find` pass per marker (the engine switched
off), every line parsed into a record (`keep_records=True`), the whole input as one block.
Hypothesis mixes the real example lines of every format with mutated DDTREE lines, other
ranks, noise, ANSI codes and binary bytes, and cuts them into random blocks.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specscope.telemetry import LogQuery, markers, read_logs
from specscope.telemetry.formats import LINE_FORMATS
from specscope.telemetry.markers import MarkerFinder
from specscope.telemetry.scan import Scanner, ScanOptions, count_newlines

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
REAL_LINES = sorted(
    {
        line
        for path in FIXTURES.glob("*.log")
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
        if line.strip()
    }
)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _canonical(value):
    """JSON with floats rounded: the engines sum the same numbers in a different order."""
    if isinstance(value, float):
        return value if math.isnan(value) else round(value, 9)
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def _summary_json(scanner: Scanner) -> dict:
    j = scanner.summary.to_json()
    j.pop("malformed_examples")  # which 5 come first depends on the scan order of the keys
    return _canonical(j)


def _reference(data: bytes, options: dict) -> dict:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(markers, "_ac", None)  # one find pass per marker, as before the engine
        scanner = Scanner(ScanOptions(formats=list(LINE_FORMATS), keep_records=True, **options))
        assert scanner._finder.find(data, [b"x"]) is None
        scanner.feed(data, "x")
    return _summary_json(scanner)


def _fast(data: bytes, cuts: list[int], options: dict) -> dict:
    scanner = Scanner(ScanOptions(formats=list(LINE_FORMATS), **options))
    assert scanner._fast is not None or options.get("keep_records")
    lines = data.split(b"\n")
    start = 0
    for cut in [*sorted(set(cuts)), len(lines)]:
        if cut > start:
            block = b"\n".join(lines[start:cut])
            if cut < len(lines):
                block += b"\n"
            if block:
                scanner.feed(block, "x")
            start = cut
    return _summary_json(scanner)


ranks = st.sampled_from(["TP0", "TP1", "TP0 EP1", "DP0 TP0", "TP10", "TP3 EP0", ""])
numbers = st.sampled_from(["0.00", "1.00", "2.37", "3.50", "7", "12.25", "x", ""])


@st.composite
def ddtree_line(draw):
    rank = draw(ranks)
    second = draw(st.integers(0, 59))
    stamp = f"2026-11-29 10:00:{second:02d}"
    prefix = draw(
        st.sampled_from(
            [
                f"[{stamp} {rank}] " if rank else f"[{stamp}] ",
                f"Nov 29 10:00:{second:02d} gpu01 python[7]: [{stamp} {rank}] ",
                f"[{rank}] " if rank else "",
                f"\x1b[32m[{stamp} {rank}] ",
                "",
            ]
        )
    )
    engine = draw(st.sampled_from(["DDTREE", "DFLASH", "DSPARK"]))
    acc, com = draw(numbers), draw(numbers)
    body = draw(
        st.sampled_from(
            [
                f"req=r{second} step={second} avg_accepted_drafts={acc} avg_commit_len={com}",
                f"avg_accepted_drafts={acc} avg_commit_len={com}",
                f"step={second} avg_commit_len={com} avg_accepted_drafts={acc}",
                f"avg_accepted_drafts={acc}",
                f"avg_accepted_drafts={acc} bs=4 avg_commit_len={com}",
            ]
        )
    )
    tail = draw(st.sampled_from(["", " ", "\r", "\x1b[0m", " extra=1", " DDTREE metrics avg_commit_len=2"]))
    return f"{prefix}{engine} metrics {body}{tail}"


noise = st.sampled_from(
    [
        'Nov 29 10:00:01 gpu01 python[7]: INFO: 127.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK',
        "[2026-11-29 10:00:02 TP2] Prefill batch, #new-seq: 1, #new-token: 27, token usage: 0.01",
        "TP0] but nothing else",
        "Decode batch without fields",
        "SpecDecoding metrics: nothing",
        "",
    ]
)
line = st.sampled_from(REAL_LINES) | ddtree_line() | noise | st.text(max_size=40)
options = st.sampled_from(
    [
        {"rank": "TP0"},
        {"rank": "TP1"},
        {"rank": None},
        {"rank": "DP0"},
        {"rank": "TP0", "since": datetime(2026, 11, 29, 10, 0, 20).timestamp()},
        {"rank": "TP0", "until": datetime(2026, 11, 29, 10, 0, 40).timestamp()},
    ]
)


@FUZZ
@given(
    lines=st.lists(line, max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=4),
    opts=options,
    binary=st.binary(max_size=30),
)
def test_fast_engines_equal_the_general_parser(lines, cuts, opts, binary):
    data = "\n".join(lines).encode("utf-8", "replace") + (b"\n" + binary if binary else b"")
    assert _fast(data, cuts, opts) == _reference(data, opts)


def test_real_fixtures_equal_the_general_parser():
    """Every fixture line at once, many copies: a fixed case the fuzzer need not find."""
    data = ("\n".join(REAL_LINES) + "\n").encode() * 5
    for opts in ({"rank": "TP0"}, {"rank": None}):
        cuts = [len(REAL_LINES) // 2, len(REAL_LINES) * 3]
        fast = _fast(data, cuts, opts)
        assert fast == _reference(data, opts)
        assert fast["records"] > 0 and fast["formats"]
        with pytest.MonkeyPatch.context() as m:  # an env without the engine: same answer
            m.setattr(markers, "_ac", None)
            assert _fast(data, cuts, opts) == fast


def test_marker_finder_finds_overlapping_keys():
    """Keys that can overlap in text are searched in overlapping mode, so none is lost."""
    finder = MarkerFinder()
    assert finder._automaton((b"abcd", b"cdef", b"zz"))[1]  # overlapping mode
    assert finder.find(b"xxabcdefzz abcd", [b"abcd", b"cdef", b"zz"]) == {
        b"abcd": [2, 11],
        b"cdef": [4],
        b"zz": [8],
    }
    keys = [b"Decode batch", b"avg_commit="]
    assert not finder._automaton(tuple(keys))[1]
    assert finder.find(b"avg_commit=1 Decode batch, avg_commit=2", keys) == {
        b"avg_commit=": [0, 27],
        b"Decode batch": [13],
    }


@pytest.mark.parametrize("size", [0, 1, 10, 70_000, 200_001])
def test_count_newlines_matches_bytes_count(size):
    block = (b"ab\ncd\n\n" * (size // 7 + 1))[:size]
    assert count_newlines(block) == block.count(b"\n")


@pytest.mark.parametrize("block_size", [7, 64, 1 << 20])
def test_line_aligned_reads_equal_one_block(tmp_path, block_size):
    """Newline-aligned positioned reads, with lines longer than a block and no final newline, give
    the summary of the whole text parsed at once."""
    text = "\n".join(REAL_LINES) + "\n" + "x" * 500 + "\n" + REAL_LINES[0]
    path = tmp_path / "journal.log"
    path.write_text(text, encoding="utf-8")
    got = read_logs(LogQuery(paths=[str(path)], rank=None, block_size=block_size)).summary
    scanner = Scanner(ScanOptions(formats=list(LINE_FORMATS), rank=None))
    scanner.feed(text.encode(), str(path))
    assert _summary_json(scanner) == _canonical(
        {k: v for k, v in got.to_json().items() if k != "malformed_examples"}
    )
    assert got.lines == text.count("\n") + 1


@pytest.mark.parametrize("tail", ["", "\r", ":", "=2"])
def test_marker_without_trailing_space_is_still_read(tail):
    """Regression: the fast path's completeness count once looked for `" metrics "`, so a
    marker at a line end (or followed by `:`) was neither counted nor parsed."""
    data = (
        "[2026-11-29 10:00:00 TP0] DDTREE metrics avg_accepted_drafts=1.00 avg_commit_len=2.00\n"
        f"[2026-11-29 10:00:01 TP0] DFLASH metrics{tail}\n"
        "(APIServer pid=1) INFO 05-01 14:24:50 [metrics.py:101] SpecDecoding metrics: Mean "
        "acceptance length: 2.37, Accepted: 89 tokens\n"
    ).encode()
    fast = _fast(data, [], {"rank": "TP0"})
    assert fast == _reference(data, {"rank": "TP0"})
    assert fast["malformed"] == 1 and fast["formats"] == {"ddtree": 1, "vllm_spec": 1}
