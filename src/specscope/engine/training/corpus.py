"""A prompt corpus on disk: one JSON object per line (optionally gzip-compressed), each a prompt
the target answers and the drafter then learns from.

The corpus is built once from real text (corpus_build.py) and travels as one file: to another
machine for the target's responses, and into the repository as the fixed held-out sets the
figures are measured on. Keeping the record this small (what to send, how, where it came from,
which split) is what lets training, evaluation and the bench read the same sets.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

#: The splits a record may belong to: training, and the two held-out sets of issue #39.
SPLITS = ("train", "heldout-code", "heldout-chat")


@dataclass(frozen=True)
class CorpusPrompt:
    id: str  # unique within a corpus, stable across builds of the same sources
    kind: str  # what the prompt asks for (e.g. code-write, doc-summary): the card's category
    source: str  # where its text came from, e.g. "stdlib:fractions", "shakespeare:hamlet"
    text: str  # the user turn (raw=False) or the text to continue (raw=True)
    raw: bool  # True: continue the text as is; False: one user turn in the chat template
    split: str  # one of SPLITS


class CorpusError(ValueError):
    """A corpus file that cannot be read: the path and line say where."""


def write_corpus(path: Path, prompts: Iterable[CorpusPrompt]) -> int:
    """Write the records (gzip when the name ends in .gz, with no name or time in its header, so
    the same records give the same bytes: a rebuilt corpus compares by checksum); returns how
    many."""
    lines = [json.dumps(asdict(p), ensure_ascii=False) + "\n" for p in prompts]
    data = "".join(lines).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return len(lines)


def read_corpus(path: Path, split: str | None = None) -> list[CorpusPrompt]:
    """The records of `path` (only those of `split` when given), in file order. A missing file,
    a malformed line, a missing field or an unknown split is one CorpusError naming the line.
    Lines are split at "\n" only: a record's text may hold U+2028, which str.splitlines cuts."""
    if not path.is_file():
        raise CorpusError(f"{path}: no such corpus file")
    out: list[CorpusPrompt] = []
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{path}: not a readable corpus file ({exc})") from None
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            rec = CorpusPrompt(
                id=str(obj["id"]),
                kind=str(obj["kind"]),
                source=str(obj["source"]),
                text=str(obj["text"]),
                raw=bool(obj["raw"]),
                split=str(obj["split"]),
            )
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise CorpusError(f"{path}:{lineno}: not a corpus record ({exc})") from None
        if rec.split not in SPLITS:
            raise CorpusError(f"{path}:{lineno}: unknown split {rec.split!r}")
        if split is None or rec.split == split:
            out.append(rec)
    return out
