"""Hypothesis: no parser raises on any input, and the fast DDTREE path gives exactly the
summary the general parser gives."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specscope.telemetry import MetricsError, parse_metrics_text, parse_server_info
from specscope.telemetry.custom import custom_format
from specscope.telemetry.ingest import LINE_FORMATS
from specscope.telemetry.llamacpp import parse_llamacpp_timings
from specscope.telemetry.prefix import PrefixParser, clean_line
from specscope.telemetry.scan import Scanner, ScanOptions

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text that is likely to reach deep into the parsers: markers, separators, numbers, placeholders.
PIECES = [
    "Decode batch",
    ".",
    ",",
    " [12]",
    "#running-req: ",
    "accept len: ",
    "accept rate: ",
    "cuda graph: ",
    "True",
    "#token: ",
    ": ",
    ", ",
    "SpecDecoding metrics: ",
    "Mean acceptance length: ",
    "Per-position acceptance rate: ",
    "Draft acceptance rate: ",
    "%",
    "Accepted: ",
    " tokens",
    "DDTREE metrics ",
    "DFLASH metrics ",
    "avg_accepted_drafts=",
    "avg_commit_len=",
    "req=",
    "step=",
    "avg_commit=",
    "AL=",
    "accepted=",
    "/",
    "(",
    ")",
    "draft acceptance rate = ",
    "draft acceptance = ",
    " accepted / ",
    " generated)",
    "mean acceptance length = ",
    "statistics x: #calls = ",
    "#gen drafts = ",
    "#acc tokens = ",
    '"timings": {',
    '"draft_n": ',
    "}",
    "[2026-11-29 10:00:00 TP0] ",
    "[TP1 EP0] ",
    "Nov 29 10:00:00 h p[1]: ",
    "INFO 05-01 14:24:50 ",
    "1",
    "2.00",
    "-3",
    "nan",
    "inf",
    "…",
    "..",
    "1e999",
    "\x1b[0m",
    "\x00",
    "\r",
    " ",
    "\t",
    "é",
    "0x1F",
]
structured = st.lists(st.sampled_from(PIECES) | st.text(max_size=5), max_size=30).map("".join)
any_text = st.text(max_size=300) | structured


@FUZZ
@given(any_text)
def test_line_parsers_never_raise(line):
    prefixes = PrefixParser()
    cleaned = clean_line(line)
    for fmt in LINE_FORMATS:
        fmt.parse(cleaned, prefixes)


@FUZZ
@given(st.lists(any_text, max_size=20))
def test_custom_pattern_never_raises(lines):
    import re

    fmt = custom_format(re.compile(r"(?P<ts>\S+) .*?c=(?P<commit_len>\S+)(?: n=(?P<n_steps>\S+))?"))
    prefixes = PrefixParser()
    for line in lines:
        fmt.parse(line, prefixes)


@FUZZ
@given(st.binary(max_size=2000) | structured.map(lambda s: s.encode("utf-8", "replace")))
def test_scanner_never_raises_on_bytes(blob):
    for keep in (False, True):
        scanner = Scanner(ScanOptions(formats=list(LINE_FORMATS), rank=None, keep_records=keep))
        scanner.feed(blob, "fuzz")
        json.dumps(scanner.summary.to_json())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


@FUZZ
@given(json_values)
def test_json_parsers_never_raise(obj):
    parse_llamacpp_timings(obj)
    parse_llamacpp_timings({"timings": obj})
    parse_server_info(obj)
    parse_server_info({"internal_states": [obj]})


@FUZZ
@given(
    st.text(max_size=400)
    | st.lists(
        st.sampled_from(
            [
                "vllm:spec_decode_num_drafts_total",
                "{",
                "}",
                'position="',
                '"',
                " ",
                "1",
                "x",
                "\n",
                "# TYPE ",
                " counter",
                "sglang:spec_accept_length",
                "NaN",
            ]
        ),
        max_size=25,
    ).map("".join)
)
def test_metrics_text_parses_or_says_why(text):
    try:
        parse_metrics_text(text)
    except MetricsError as exc:
        assert "\n" not in str(exc).strip()


# --- fast path == general path ------------------------------------------------------------------

ranks = st.sampled_from(["TP0", "TP1", "TP0 EP1", "TP2 EP0", "DP0 TP0", "TP10", ""])
values = st.sampled_from(["0.00", "1.00", "2.00", "3.50", "7", "abc", "", "1.2.3"])


@st.composite
def ddtree_line(draw):
    rank = draw(ranks)
    second = draw(st.integers(0, 59))
    ts = f"2026-11-29 10:00:{second:02d}"
    prefix = draw(
        st.sampled_from(
            [
                f"[{ts} {rank}] " if rank else f"[{ts}] ",
                f"Nov 29 10:00:{second:02d} gpu01 python[7]: [{ts} {rank}] " if rank else "",
                f"[{rank}] " if rank else "",
                f"\x1b[32m[{ts} {rank}] " if rank else "x ",
                f"garbage {rank}] ",
            ]
        )
    )
    engine = draw(st.sampled_from(["DDTREE", "DFLASH"]))
    parts = []
    if draw(st.booleans()):
        parts.append(f"req={draw(st.sampled_from(['a1', 'b-2', 'x=y']))}")
    if draw(st.booleans()):
        parts.append(f"step={draw(st.sampled_from(['3', '12', 'z']))}")
    acc, com = draw(values), draw(values)
    order = draw(st.sampled_from(["canonical", "swapped", "only_commit", "only_acc", "extra"]))
    if order == "canonical":
        parts += [f"avg_accepted_drafts={acc}", f"avg_commit_len={com}"]
    elif order == "swapped":
        parts += [f"avg_commit_len={com}", f"avg_accepted_drafts={acc}"]
    elif order == "only_commit":
        parts += [f"avg_commit_len={com}"]
    elif order == "only_acc":
        parts += [f"avg_accepted_drafts={acc}"]
    else:
        parts += [f"avg_accepted_drafts={acc}", "bs=4", f"avg_commit_len={com}"]
    tail = draw(st.sampled_from(["", " ", "\r", "\x1b[0m", " extra=1", ","]))
    return f"{prefix}{engine} metrics " + " ".join(parts) + tail


noise = st.sampled_from(
    [
        "INFO: 127.0.0.1 - POST /generate 200",
        "[2026-11-29 10:00:00 TP0] Decode batch, #running-req: 1, #token: 5, token usage: 0.00, accept len: 2.00, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0",
        "TP0] but nothing else",
        "",
    ]
)


@pytest.mark.parametrize("rank", ["TP0", "TP1", None])
@FUZZ
@given(lines=st.lists(ddtree_line() | noise, max_size=40), window=st.booleans())
def test_fast_path_equals_general_parser(rank, lines, window):
    data = ("\n".join(lines) + "\n").encode()
    from datetime import datetime

    since = datetime(2026, 11, 29, 10, 0, 20).timestamp() if window else None
    out = []
    for keep in (False, True):  # keep_records=True never takes the fast path
        scanner = Scanner(
            ScanOptions(formats=list(LINE_FORMATS), rank=rank, since=since, keep_records=keep)
        )
        scanner.feed(data, "x")
        j = scanner.summary.to_json()
        j.pop("malformed_examples")
        out.append(j)
    assert out[0] == out[1]
