"""Incremental detokenization: deltas concatenate to the full text, also when a character spans
several tokens (a byte-level tokenizer: one token per UTF-8 byte)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from specscope.serve.formatting import TextStream


def _bytes_detok(ids: list[int]) -> str:
    return bytes(ids).decode("utf-8", errors="replace")


@given(text=st.text(max_size=40), cuts=st.lists(st.integers(1, 5), max_size=40))
def test_deltas_concatenate_to_the_text(text: str, cuts: list[int]) -> None:
    ids = list(text.encode("utf-8"))
    stream = TextStream(_bytes_detok)
    out, i = [], 0
    for c in cuts:
        if i >= len(ids):
            break
        out.append(stream.add(ids[i : i + c]))
        i += c
    out.append(stream.add(ids[i:], final=True))
    assert "".join(out) == text
    assert all("\ufffd" not in d for d in out[:-1]) or "\ufffd" in text


def test_incomplete_character_is_held_back() -> None:
    stream = TextStream(_bytes_detok)
    euro = list("€".encode())
    assert stream.add(euro[:2]) == ""
    assert stream.add(euro[2:]) == "€"
