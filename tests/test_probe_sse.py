"""The incremental SSE parser: same events for any split of the bytes, never raises."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from specscope.probe.sse import SSEEvent, SSEParser


def parse_all(pieces: list[bytes]) -> list[SSEEvent]:
    p = SSEParser()
    out: list[SSEEvent] = []
    for piece in pieces:
        out += p.feed(piece)
    return out + p.close()


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, prev = [], 0
    for c in points:
        pieces.append(data[prev:c])
        prev = c
    pieces.append(data[prev:])
    return pieces


# A valid stream: events of 1..3 data lines (any text without line breaks, incl. non-ASCII),
# optional event names and comments, any of the three line terminators.
line_text = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]), max_size=30
)
event_st = st.tuples(
    st.lists(line_text, min_size=1, max_size=3),
    st.one_of(st.none(), st.sampled_from(["message", "update", "error"])),
    st.booleans(),
)


def encode(events, eol: bytes) -> bytes:
    out = b""
    for lines, name, comment in events:
        if comment:
            out += b": keep-alive" + eol
        if name:
            out += b"event: " + name.encode() + eol
        for ln in lines:
            out += b"data: " + ln.encode("utf-8") + eol
        out += eol
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.lists(event_st, max_size=8),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
)
def test_any_split_yields_the_same_events(events, eol, cuts):
    data = encode(events, eol)
    expected = [
        SSEEvent(data="\n".join(lines), event=name or "message") for lines, name, _ in events
    ]
    assert parse_all([data]) == expected
    assert parse_all(split_at(data, cuts)) == expected
    assert parse_all([bytes([b]) for b in data]) == expected  # one byte per read


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.lists(st.integers(min_value=0, max_value=500), max_size=8))
def test_garbage_never_raises(data, cuts):
    events = parse_all(split_at(data, cuts))
    assert all(isinstance(e.data, str) for e in events)
    assert events == parse_all([data])


def test_crlf_split_between_reads_is_one_line_end():
    p = SSEParser()
    assert p.feed(b"data: a\r") == []
    assert p.feed(b"\n\r") == [SSEEvent("a")]  # CR LF then a lone CR = blank line
    assert p.feed(b"\ndata: b\n\n") == [SSEEvent("b")]  # that LF belongs to the CR before it


def test_multiline_data_comments_ids_and_field_without_space():
    raw = b": comment\nid: 7\nevent: delta\ndata:first\ndata: second\nretry: 10\nfoo: bar\n\n"
    assert parse_all([raw]) == [SSEEvent("first\nsecond", event="delta", id="7")]


def test_utf8_character_split_across_reads():
    raw = "data: héllo ✓\n\n".encode()
    cut = raw.index("✓".encode()) + 1
    assert parse_all([raw[:cut], raw[cut:]]) == [SSEEvent("héllo ✓")]


def test_event_without_trailing_blank_line_is_flushed_on_close():
    p = SSEParser()
    assert p.feed(b'data: {"stop": true}') == []
    assert p.pending
    assert p.close() == [SSEEvent('{"stop": true}')]
    assert p.had_partial_line


def test_blank_lines_without_data_dispatch_nothing():
    assert parse_all([b"\n\n\r\n: only a comment\n\n"]) == []
