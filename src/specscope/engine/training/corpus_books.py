"""Literature as material: Shakespeare, Milton and the King James Bible cut into passages.

Chat is not only about code: people ask a small model to continue, paraphrase, explain,
summarise and imitate text, and the target's answers there are another distribution for the
drafter to learn. Public-domain books shipped inside PyPI packages give that text without
writing any: plays cut at speech boundaries within a scene (the act and scene say where),
sonnets whole, long poems and prose at stanza or paragraph boundaries, Bible chapters at verse
boundaries. Each passage gets one request, rotating through the kinds, so that every kind sees
different text; Milton is never training text (the held-out chat set's literature).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from specscope.engine.training.corpus import CorpusPrompt
from specscope.engine.training.corpus_phrasing import make_prompt, render

#: A passage in a prompt (the instruction adds up to ~200 characters).
PASSAGE_CHARS = (350, 1100)
#: Kinds a passage of a play, a poem or scripture is used for, in rotation.
PLAY_KINDS = ("lit-continue", "lit-paraphrase", "lit-explain", "lit-style", "lit-summary")
SONNET_KINDS = ("lit-continue", "lit-paraphrase", "lit-explain", "lit-style")
BIBLE_KINDS = ("lit-continue", "lit-paraphrase", "lit-explain", "lit-summary")

_HEADING = re.compile(
    r"^\s*(?:(?:ACT|Act|SCENE|Scene|BOOK|Book)\s+(?:[IVXLC]+|\d+)\b.*|THE \w+ BOOK|[IVXLC]+\.?)\s*$"
)
_LINE_NUMBER = re.compile(r"\s{2,}\d+\s*$")

Passage = tuple[str, int, str]  # (where, number of its first piece, unique in the text; text)


def _blocks(text: str) -> list[str]:
    """Blank-line separated blocks, trailing verse line numbers removed."""
    text = "\n".join(_LINE_NUMBER.sub("", ln).rstrip() for ln in text.splitlines())
    return [b.strip("\n") for b in re.split(r"\n\s*\n", text) if b.strip()]


def _where(current: str, heading: str) -> str:
    """The location after `heading`: an act resets the scene, a scene keeps its act."""
    h = " ".join(heading.split()).rstrip(".")
    if h.upper().startswith("SCENE") and current.upper().startswith("ACT"):
        return f"{current.split(',')[0]}, {h}"
    return h


def _split_long(block: str, hi: int) -> list[str]:
    out, cur = [], ""
    for line in block.splitlines():
        if cur and len(cur) + 1 + len(line) > hi:
            out.append(cur)
            cur = ""
        cur = f"{cur}\n{line}" if cur else line
    return [*out, cur] if cur else out


def group(units: list[str], lo: int, hi: int, sep: str = "\n\n") -> list[tuple[int, int]]:
    """(start, end) index ranges of consecutive units joined into pieces of lo..hi characters
    (a shorter leftover is dropped: too little to ask about)."""
    out, start, size = [], 0, 0
    for i, unit in enumerate(units):
        if i > start and size + len(sep) + len(unit) > hi:
            if size >= lo:
                out.append((start, i))
            start, size = i, 0
        size += (len(sep) if i > start else 0) + len(unit)
    if units and size >= lo:
        out.append((start, len(units)))
    return out


def passages(text: str, lo: int, hi: int) -> list[Passage]:
    """(where, number, text) of consecutive whole blocks of lo..hi characters (a longer block
    is cut at line ends; a passage is numbered by its first piece). A heading (act, scene,
    book, a sonnet's number) ends a passage and names where the next ones are. Blocks before
    the first heading (title page, list of persons) are skipped when there is one."""
    blocks = _blocks(text)
    first = next((i for i, b in enumerate(blocks) if _is_heading(b)), 2)
    out: list[Passage] = []
    where, pieces, n = "", [], 0  # pieces: (number in the text, text) of the current section
    for i in range(first, len(blocks) + 1):
        if i < len(blocks) and not _is_heading(blocks[i]):
            split = _split_long(blocks[i], hi)
            pieces += list(zip(range(n, n + len(split)), split, strict=True))
            n += len(split)
            continue
        texts = [t for _, t in pieces]
        out += [(where, pieces[a][0], "\n\n".join(texts[a:b])) for a, b in group(texts, lo, hi)]
        pieces = []
        if i < len(blocks):
            where = _where(where, blocks[i].splitlines()[-1])
    return out


def _is_heading(block: str) -> bool:
    lines = block.splitlines()
    return len(lines) <= 2 and any(_HEADING.match(ln) for ln in lines)


def lit_prompt(
    kind: str, source: str, unit: str, text: str, meta: dict[str, str], seed: int, split: str
) -> CorpusPrompt | None:
    """One request about a passage; `meta` gives the title, the author and where it is."""
    if kind == "lit-continue":
        return make_prompt(kind, source, unit, text.rstrip() + "\n", raw=True, split=split)
    fields = {"title": meta["title"], "author": meta["author"], "where": meta["where"]}
    return make_prompt(
        kind, source, unit, render(kind, seed, f"{source}/{unit}", text=text, **fields), split=split
    )


def book_prompts(
    source: str, text: str, meta: dict[str, str], kinds: tuple[str, ...], seed: int, split: str
) -> Iterator[CorpusPrompt]:
    """A prompt per passage of a book, the kinds in rotation."""
    for n, (where, index, passage) in enumerate(passages(text, *PASSAGE_CHARS)):
        kind = kinds[n % len(kinds)]
        m = meta | {"where": where or "an excerpt"}
        p = lit_prompt(kind, source, f"p{index}", passage, m, seed, split)
        if p is not None:
            yield p


def sonnet_prompts(text: str, seed: int) -> Iterator[CorpusPrompt]:
    """Every sonnet once for each kind: each is a whole poem (14 lines, ~600 characters)."""
    meta = {"title": "Shakespeare's Sonnets", "author": "Shakespeare"}
    for where, _, sonnet in passages(text, 300, 1000):
        number = where.removeprefix("Sonnet ").strip()
        for kind in SONNET_KINDS:
            p = lit_prompt(
                kind,
                "shakespeare:sonnets",
                number,
                sonnet,
                meta | {"where": f"Sonnet {number}"},
                seed,
                "train",
            )
            if p is not None:
                yield p


def bible_prompts(verses: list[dict[str, Any]], seed: int) -> Iterator[CorpusPrompt]:
    """Runs of consecutive verses within a chapter, the kinds in rotation."""
    n = 0
    for (book, chapter), run in _chapters(verses):
        lines = [f"{v['verse']} {v['text']}" for v in run]
        for a, b in group(lines, *PASSAGE_CHARS, sep="\n"):
            where = f"{book} {chapter}:{run[a]['verse']}-{run[b - 1]['verse']}"
            meta = {
                "title": f"the Book of {book}",
                "author": "the King James Bible",
                "where": where,
            }
            text = f"{where}\n\n" + "\n".join(lines[a:b])
            kind, n = BIBLE_KINDS[n % len(BIBLE_KINDS)], n + 1
            unit = where.removeprefix(f"{book} ")
            p = lit_prompt(kind, f"bible:{book}", unit, text, meta, seed, "train")
            if p is not None:
                yield p


def _chapters(verses: list[dict[str, Any]]) -> list[tuple[tuple[str, int], list[dict[str, Any]]]]:
    out: list[tuple[tuple[str, int], list[dict[str, Any]]]] = []
    for v in verses:
        key = (str(v["book"]), int(v["chapter"]))
        if not out or out[-1][0] != key:
            out.append((key, []))
        out[-1][1].append(v)
    return out
