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


class _ByteCodec:
    """Bytes as token ids: enough to see which texts became which prompts."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def chat_ids(self, messages: list[dict]) -> list[int]:
        return [0, *self.encode(messages[0]["content"])]


def test_the_trainer_reads_a_corpus_and_held_out_sets(tmp_path):
    from types import SimpleNamespace

    from specscope.engine.training import cli, pipeline

    corpus = tmp_path / "corpus.jsonl.gz"
    write_corpus(corpus, [*RECORDS, CorpusPrompt("c3", "doc-summary", "stdlib:csv", "Sum", False,
                                                 "train")])  # fmt: skip
    target = SimpleNamespace(codec=_ByteCodec())
    args = cli.parse_args(["--out", str(tmp_path / "d"), "--corpus", str(corpus)])
    train, held = pipeline._text_prompts(args, target)
    # raw records are text to continue, the others one chat turn; held out by split name
    assert train == [("code-write", [0, *"Write `split(s)` …".encode()]), ("doc-summary",
                     [0, *b"Sum"])]  # fmt: skip
    assert held == [("heldout-chat", list(b"Shall I compare"))]
    args = cli.parse_args(["--out", "d", "--corpus", str(corpus), "--max-prompts", "1",
                           "--eval-set", f"{corpus},{corpus}", "--eval-set-prompts", "2"])  # fmt: skip
    train, held = pipeline._text_prompts(args, target)
    assert [k for k, _ in train] == ["code-write"]
    assert [k for k, _ in held] == ["corpus"] * 4  # every split of each file, named by its stem
    assert cli.main(["--out", str(tmp_path / "d"), "--corpus", str(tmp_path / "none")]) == 2


def test_the_same_records_give_the_same_gzip_bytes(tmp_path):
    a, b = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"
    write_corpus(a, RECORDS)
    write_corpus(b, RECORDS)
    assert a.read_bytes() == b.read_bytes()
    # no time in the header (gzip's MTIME, bytes 4-8), no file name (FLG's FNAME bit): two
    # builds in different seconds or under other names still give the same bytes
    head = a.read_bytes()[:10]
    assert head[4:8] == b"\0\0\0\0" and not head[3] & 0x08


def test_a_line_separator_inside_a_text_stays_in_its_record(tmp_path):
    rec = CorpusPrompt("u", "lit-continue", "book", "one\u2028two\x85three", True, "train")
    write_corpus(tmp_path / "u.jsonl", [rec])
    assert read_corpus(tmp_path / "u.jsonl") == [rec]
    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(CorpusError, match="not a readable corpus file"):
        read_corpus(tmp_path / "bad.jsonl.gz")
