"""The fast engines give the general parser's answer exactly.

Production scanning takes four shortcuts: all markers found in one Aho-Corasick pass
(markers.py), the canonical DDTREE lines counted by one regex without building records
(ddtree.py's block fast path), the canonical SGLang `Decode batch` / vLLM `SpecDecoding metrics`
lines read by one regex each (the line fast paths in sglang.py and vllm.py), and files read as
newline-aligned positioned reads (sources.py). The reference here is
the general path the fast ones replaced: one `bytes.find` pass per marker (the engine switched
off), every line parsed into a record (`keep_records=True`), the whole input as one block.
Hypothesis mixes the real example lines of every format with mutated DDTREE, Decode batch and
SpecDecoding lines, other
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
from specscope.telemetry.ingest import LINE_FORMATS
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
    assert scanner._block_fast or options.get("keep_records")
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
    tail = draw(
        st.sampled_from(["", " ", "\r", "\x1b[0m", " extra=1", " DDTREE metrics avg_commit_len=2"])
    )
    return f"{prefix}{engine} metrics {body}{tail}"


@st.composite
def sglang_decode_line(draw):
    """The canonical `Decode batch` shape (sglang.py's fast path) and its near misses."""
    rank = draw(ranks)
    second = draw(st.integers(0, 61))
    stamp = draw(
        st.sampled_from(
            [f"2026-11-29 10:00:{second:02d}", "2026-13-40 10:00:00", "2026-11-29T10:00:01"]
        )
    )
    prefix = draw(
        st.sampled_from(
            [
                f"[{stamp} {rank}] " if rank else f"[{stamp}] ",
                f"Nov 29 10:00:01 gpu01 python[7]: [{stamp} {rank}] ",
                f"[2026-11-29 09:00:00 TP1] x [{stamp} {rank}] ",
                f"\x1b[32m[{stamp} {rank}] ",
                "Decode batch [",
                "",
            ]
        )
    )
    acc, rate, gen = draw(numbers), draw(numbers), draw(numbers)
    sep = draw(st.sampled_from([",", ".", " [12],"]))
    accept = draw(
        st.sampled_from(
            [
                f"accept len: {acc}, accept rate: {rate}, ",
                f"accept len: {acc}, ",
                f"accept rate: {rate}, ",
                "",
            ]
        )
    )
    graph = draw(st.sampled_from(["cuda graph: True, ", "npu graph: False, ", ""]))
    queue = draw(st.sampled_from(["0", "3", "x"]))
    tail = draw(
        st.sampled_from(["", ", ", " ", "\r", ", est. decode TFLOPS/s (per GPU): 1.0", "…"])
    )
    return (
        f"{prefix}Decode batch{sep} #running-req: {draw(st.sampled_from(['1', '24', 'x']))}, "
        f"#token: 2701, token usage: 0.02, {accept}{graph}gen throughput (token/s): {gen}, "
        f"#queue-req: {queue}{tail}"
    )


@st.composite
def vllm_spec_line(draw):
    """The canonical `SpecDecoding metrics` shape (vllm.py's fast path) and its near misses."""
    second = draw(st.integers(0, 59))
    prefix = draw(
        st.sampled_from(
            [
                f"(APIServer pid=1) INFO 11-29 10:00:{second:02d} [metrics.py:101] ",
                f"Nov 29 10:00:{second:02d} gpu01 vllm[9]: INFO 11-29 10:00:00 [metrics.py:1] ",
                f"[2026-11-29 10:00:{second:02d} TP1] ",
                "SpecDecoding metrics ",
                "",
            ]
        )
    )
    mean, pct = draw(numbers), draw(numbers)
    per_pos = draw(st.sampled_from(["0.600, 0.385, 0.000", "0.5", "0.600, …", ""]))
    accepted = draw(st.sampled_from(["89", "0", "x"]))
    return (
        f"{prefix}SpecDecoding metrics: Mean acceptance length: {mean}, Accepted throughput: 8.90 "
        f"tokens/s, Drafted throughput: 97.50 tokens/s, Accepted: {accepted} tokens, Drafted: 975 "
        f"tokens, Per-position acceptance rate: {per_pos}, Avg Draft acceptance rate: {pct}%"
        + draw(st.sampled_from(["", " ", "\r", " extra"]))
    )


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
line = (
    st.sampled_from(REAL_LINES)
    | ddtree_line()
    | sglang_decode_line()
    | vllm_spec_line()
    | noise
    | st.text(max_size=40)
)
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


def test_canonical_interval_lines_take_the_fast_parsers(monkeypatch):
    """The bench's (and real servers') interval lines are read by the line fast paths, not the
    general parsers, and give the general parsers' summary."""
    from specscope.telemetry import scan

    data = (
        b"Nov 29 10:00:01 gpu01 python[7]: [2026-11-29 10:00:01 TP0] Decode batch, #running-req: 1, "
        b"#token: 2702, token usage: 0.02, accept len: 2.05, accept rate: 0.41, cuda graph: True, "
        b"gen throughput (token/s): 32.70, #queue-req: 0\n"
        b"[2026-11-29 10:00:02 TP1] Decode batch, #running-req: 2, #token: 9, token usage: 0.02, "
        b"cuda graph: True, gen throughput (token/s): 30.00, #queue-req: 1\n"
        b"(APIServer pid=1) INFO 11-29 10:00:03 [metrics.py:101] SpecDecoding metrics: Mean "
        b"acceptance length: 2.37, Accepted throughput: 8.90 tokens/s, Drafted throughput: 97.50 "
        b"tokens/s, Accepted: 89 tokens, Drafted: 975 tokens, Per-position acceptance rate: 0.600, "
        b"0.385, 0.000, Avg Draft acceptance rate: 9.1%\n"
    )
    real_clean = scan.clean_bytes
    calls: list[bytes] = []

    def counting_clean(raw: bytes) -> str:  # every general parse starts here
        calls.append(raw)
        return real_clean(raw)

    for opts in ({"rank": "TP0"}, {"rank": None}):
        expected = _reference(data, opts)
        calls.clear()
        monkeypatch.setattr(scan, "clean_bytes", counting_clean)
        got = _fast(data, [], opts)
        monkeypatch.setattr(scan, "clean_bytes", real_clean)
        assert got == expected
        assert calls == []  # no line went through the general parsers
        assert got["formats"] == (
            {"sglang_decode": 1, "vllm_spec": 1}
            if opts["rank"]
            else {"sglang_decode": 2, "vllm_spec": 1}
        )
        assert got["filtered"]["other_rank"] == (1 if opts["rank"] else 0)


_DECODE_BODY = (
    "Decode batch, #running-req: 2, #token: 9, token usage: 0.02, accept len: 2.50, accept rate: "
    "0.50, cuda graph: True, gen throughput (token/s): 30.00, #queue-req: 1"
)
_SPEC_BODY = (
    "SpecDecoding metrics: Mean acceptance length: 2.37, Accepted throughput: 8.90 tokens/s, "
    "Drafted throughput: 97.50 tokens/s, Accepted: 89 tokens, Drafted: 975 tokens, Per-position "
    "acceptance rate: 0.600, 0.385, Avg Draft acceptance rate: 9.1%"
)


@pytest.mark.parametrize(
    "text",
    [
        f"[2026-11-29 10:00:01 TP0] {_DECODE_BODY}",
        f"Decode batch [[2026-11-29 10:00:01 TP0] {_DECODE_BODY}",  # marker before the stamp
        f"[2026-11-29 09:00:00 TP1] x [2026-11-29 10:00:01 TP0] {_DECODE_BODY}",  # first stamp wins
        f"[2026-11-29 10:00:61 TP0] {_DECODE_BODY}",  # second 61: no timestamp
        f"[2026-13-29 10:00:01 TP0 EP1] {_DECODE_BODY}",  # month 13: no timestamp
        f"[2026-11-29 10:00:01] {_DECODE_BODY}, ",  # no rank, old trailing comma
        f"[2026-11-29 10:00:01 TP0] {_DECODE_BODY}".replace("2.50", "9" * 400),  # inf
        f"\x1b[32m[2026-11-29 10:00:01 TP0] {_DECODE_BODY}",
        f"(APIServer pid=1) INFO 11-29 10:00:03 [metrics.py:101] {_SPEC_BODY}",
        f"SpecDecoding metrics [2026-11-29 10:00:01 TP1] {_SPEC_BODY}",
        f"[2026-11-29 10:00:01 TP1] {_SPEC_BODY}".replace("2.37", "1.00"),  # no step estimate
        f"[2026-11-29 10:00:01 TP1] {_SPEC_BODY}".replace("9.1%", "…%"),
        f"[2026-11-29 10:00:01 TP1] {_SPEC_BODY}".replace("0.385", "9" * 400),  # inf: skipped
    ],
)
def test_interval_line_near_misses_equal_the_general_parser(text):
    """Shapes next to the canonical ones: the fast parsers read them or hand them on, and the
    summary is the general parsers' either way."""
    data = (text + "\n").encode()
    for opts in ({"rank": "TP0"}, {"rank": None}, {"rank": "TP0", "since": 0.0}):
        assert _fast(data, [], opts) == _reference(data, opts)
