"""The held-out split: which material no training prompt may come from, and the sets built from it.

A figure measured on prompts the drafter was trained on measures memory. So the held-out code
prompts come from whole standard-library modules that no training prompt comes from (split by
module, not by prompt: a function's neighbours share its idioms and names), and ask for new
code from a description, so there is little in the prompt to copy. The held-out chat prompts
come from those modules' documentation and from Milton, who is never training text. The
modules are pure Python, documented, not among the workload categories' files
(probe/workloads/material.py STDLIB_FILES, also training prompts), and named by words that do
not occur in ordinary prose, so that a training prompt that so much as names one can be
dropped (`LeakGuard`), as can one that holds any long line of their source.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from specscope.engine.training.corpus import CorpusPrompt
from specscope.engine.training.corpus_books import PASSAGE_CHARS, lit_prompt, passages
from specscope.engine.training.corpus_code import write_prompt
from specscope.engine.training.corpus_docs import docstring_prompts
from specscope.engine.training.corpus_sources import Texts
from specscope.engine.training.corpus_stdlib import (
    Definition,
    definitions,
    module_docstring,
    stdlib_files,
)

HELDOUT_MODULES = (
    "codeop",
    "compileall",
    "filecmp",
    "fileinput",
    "graphlib",
    "imaplib",
    "mimetypes",
    "pickletools",
    "plistlib",
    "poplib",
    "pstats",
    "pyclbr",
    "shelve",
    "symtable",
    "tabnanny",
    "timeit",
    "tomllib",
    "tracemalloc",
    "urllib.robotparser",
    "wsgiref",
    "zipapp",
    "zoneinfo",
)
#: Milton's works in the held-out chat set: (file stem in miltondata/texts, source name, prompts).
HELDOUT_MILTON = (
    ("paradise_lost_(no_introduction)_gut", "milton:paradise_lost", 7),
    ("paradise_regained_gut", "milton:paradise_regained", 4),
    ("areopagitica_gut", "milton:areopagitica", 5),
)
MILTON_KINDS = ("lit-paraphrase", "lit-explain", "lit-summary", "lit-style")
HELDOUT_CODE_PROMPTS = 32
HELDOUT_DOC_PROMPTS = 16
#: The held-out sets are fixed: their phrasings do not follow --seed.
HELDOUT_SEED = 0
#: A held-out source line at least this long (whitespace collapsed) must not be a line of any
#: training prompt; shorter lines are idioms every module shares.
LEAK_LINE_CHARS = 40


def is_heldout(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in HELDOUT_MODULES)


def heldout_sources(root: Path) -> list[tuple[str, str, str]]:
    """(module, relative path, source) of every file of the held-out modules, by path."""
    return [
        (mod, rel, (root / rel).read_text(encoding="utf-8"))
        for mod, rel in stdlib_files(root)
        if is_heldout(mod)
    ]


def _line_key(line: str) -> str:
    return " ".join(line.split())


class LeakGuard:
    """Says whether a would-be training prompt carries held-out material: a held-out module's
    name as a word, or a long line of a held-out source."""

    def __init__(self, sources: Iterable[str]) -> None:
        words = sorted({m.rsplit(".", 1)[-1] for m in HELDOUT_MODULES})
        self._names = re.compile(r"\b(?:" + "|".join(map(re.escape, words)) + r")\b")
        self._lines = {
            k
            for src in sources
            for ln in src.splitlines()
            if len(k := _line_key(ln)) >= LEAK_LINE_CHARS
        }

    def leaks(self, text: str) -> bool:
        if self._names.search(text):
            return True
        return any(_line_key(ln) in self._lines for ln in text.splitlines())


def round_robin(groups: list[list[CorpusPrompt]], n: int) -> list[CorpusPrompt]:
    """Up to n prompts, one from each group in turn: every group (a module, a source) is
    represented before any gives a second."""
    out: list[CorpusPrompt] = []
    for depth in range(max((len(g) for g in groups), default=0)):
        out += [g[depth] for g in groups if depth < len(g)]
    return out[:n]


def _worth_writing(d: Definition) -> bool:
    """A definition a held-out code prompt can ask for: described in prose (not only doctest
    examples), and a class with some methods to write."""
    prose = len(d.doc) >= 100 and not d.doc.startswith(">>>")
    return prose and (d.kind != "class" or len(d.methods) >= 3)


def heldout_stdlib(sources: list[tuple[str, str, str]]) -> tuple[list[CorpusPrompt], ...]:
    """(code, chat): write-from-description prompts for the held-out modules' documented
    definitions, and chat prompts about their docstrings, every module represented in turn."""
    code: dict[str, list[CorpusPrompt]] = {}
    chat: dict[str, list[CorpusPrompt]] = {}
    for mod, _, src in sources:
        defs, top = definitions(mod, src), mod.split(".")[0]
        made = [write_prompt(d, HELDOUT_SEED, "heldout-code") for d in defs if _worth_writing(d)]
        code.setdefault(top, []).extend(p for p in made if p is not None)
        chat.setdefault(top, []).extend(
            docstring_prompts(mod, module_docstring(src), defs, HELDOUT_SEED, "heldout-chat")
        )
    return (
        round_robin(list(code.values()), HELDOUT_CODE_PROMPTS),
        round_robin(list(chat.values()), HELDOUT_DOC_PROMPTS),
    )


def heldout_milton(texts: Texts, meta: dict[str, dict[str, str]]) -> list[CorpusPrompt]:
    """Chat prompts about Milton's passages: evenly spaced through each listed work."""
    out: list[CorpusPrompt] = []
    by_stem = {Path(name).stem: text for name, text in texts.items() if "/miltondata/" in name}
    for stem, source, count in HELDOUT_MILTON:
        if stem not in by_stem:
            continue
        found = passages(by_stem[stem], *PASSAGE_CHARS)
        title = meta.get(stem, {}).get("title", stem)
        for k in range(min(count, len(found))):
            where, index, text = found[(2 * k + 1) * len(found) // (2 * count)]
            kind = MILTON_KINDS[len(out) % len(MILTON_KINDS)]
            fields = {"title": title, "author": "Milton", "where": where or "an excerpt"}
            p = lit_prompt(kind, source, f"p{index}", text, fields, HELDOUT_SEED, "heldout-chat")
            if p is not None:
                out.append(p)
    return out
