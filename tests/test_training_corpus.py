"""The corpus file: records round-trip (plain and gzip), a split is selected, and a bad file or
line is one CorpusError naming where."""

from __future__ import annotations

import gzip

import pytest

from specscope.engine.training.corpus import CorpusError, CorpusPrompt, read_corpus, write_corpus

RECORDS = [
    CorpusPrompt("a1", "code-write", "stdlib:shlex", "Write `split(s)` …", False, "train"),
    CorpusPrompt(
        "b2", "verse-continue", "shakespeare:sonnets", "Shall I compare", True, "heldout-chat"
    ),
]


@pytest.mark.parametrize("name", ["c.jsonl", "c.jsonl.gz"])
def test_records_round_trip_and_a_split_is_selected(tmp_path, name):
    path = tmp_path / name
    assert write_corpus(path, RECORDS) == 2
    assert read_corpus(path) == RECORDS
    assert read_corpus(path, split="heldout-chat") == RECORDS[1:]
    if name.endswith(".gz"):
        with gzip.open(path, "rt") as fh:
            assert fh.readline().startswith('{"id": "a1"')


def test_a_missing_file_or_a_bad_line_is_one_error_naming_it(tmp_path):
    with pytest.raises(CorpusError, match="no such corpus file"):
        read_corpus(tmp_path / "none.jsonl")
    path = tmp_path / "bad.jsonl"
    write_corpus(path, RECORDS)
    with path.open("a") as fh:
        fh.write('{"id": "x", "kind": "k"}\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:3: not a corpus record"):
        read_corpus(path)
    path.write_text('{"id":"x","kind":"k","source":"s","text":"t","raw":false,"split":"dev"}\n')
    with pytest.raises(CorpusError, match=r":1: unknown split 'dev'"):
        read_corpus(path)
    path.write_text("not json\n")
    with pytest.raises(CorpusError, match=r":1: not a corpus record"):
        read_corpus(path)
