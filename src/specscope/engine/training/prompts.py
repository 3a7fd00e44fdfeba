"""The trainer's prompts: the workload categories' real texts, split into training and held-out.

A drafter learns what its target says about the kind of text it will be asked about, so the
prompts are the ones the measuring side sends (probe/workloads). This module is the engine's
one import of the measuring side (ARCHITECTURE §2): an offline tool's input, nothing the
served engine imports. It also decides which prompts are distinct and which evaluation prompts
training never saw, so a held-out score stays a held-out score.
"""

from __future__ import annotations

from typing import Any

from specscope.engine.loader import LoadedModel
from specscope.engine.training.corpus import CorpusPrompt

# The one import of the measuring side from the engine: an offline tool's training prompts are
# the workload categories' real texts (nothing the served engine imports; ARCHITECTURE §2).
from specscope.probe.workloads.categories import CATEGORIES

#: Chat-style categories get the target's chat template; completion continues raw text.
RAW_CATEGORIES = ("code-completion",)
EVAL_SEED_OFFSET = 1000  # held-out prompts: other seeds of the same categories
#: Every built-in category, in the workloads' order (the default of --categories).
ALL_CATEGORIES = tuple(CATEGORIES)

Prompt = tuple[str, list[int]]  # (category, token ids)


def _render(frame: Any, max_chars: int, start: int = 0) -> str:
    """head + as many whole units as fit in `max_chars` (from unit `start`, wrapping) + tail."""
    units = list(frame.units[start:]) + list(frame.units[:start])
    body, used = [], len(frame.head) + len(frame.tail)
    for unit in units:
        if body and used + len(unit) > max_chars:
            break
        body.append(unit)
        used += len(unit)
    return frame.head + "".join(body).rstrip() + ("\n" if not frame.strip else "") + frame.tail


def category_texts(
    categories: list[str],
    per_category: int,
    first_seed: int,
    max_chars: int,
    avoid: frozenset[str] = frozenset(),
) -> list[tuple[str, str]]:
    """(category, prompt text) from the shipped workload frames. A category with little
    material renders the same prompt again from another seed (5 articles make 5 summarisation
    prompts): a repeat is re-cut at a seed-chosen unit offset, another window of the same real
    text, so that more seeds give more distinct prompts (what `distinct_split` keeps). Texts in
    `avoid` (the training prompts, for an evaluation set) count as already rendered."""
    out = []
    for cat in categories:
        if cat not in CATEGORIES:
            raise ValueError(f"unknown category {cat!r} (known: {', '.join(CATEGORIES)})")
        rendered: set[str] = set(avoid)
        for seed in range(first_seed, first_seed + per_category):
            frame = CATEGORIES[cat](seed)
            text = _render(frame, max_chars)
            for attempt in range(1, 5):
                if text not in rendered or len(frame.units) < 2:
                    break
                text = _render(
                    frame, max_chars, (seed * 7919 + attempt * 104729) % len(frame.units)
                )
            rendered.add(text)
            out.append((cat, text))
    return out


def encode_prompts(loaded: LoadedModel, texts: list[tuple[str, str]]) -> list[Prompt]:
    """(category, prompt ids): each text as a chat turn (raw text for completion categories)."""
    return [
        (
            cat,
            loaded.codec.encode(text)
            if cat in RAW_CATEGORIES
            else loaded.codec.chat_ids([{"role": "user", "content": text}]),
        )
        for cat, text in texts
    ]


def encode_corpus(loaded: LoadedModel, records: list[CorpusPrompt]) -> list[Prompt]:
    """(kind, prompt ids) of corpus records: raw records as text to continue, the others as one
    user turn in the target's chat template."""
    return [
        (
            r.kind,
            loaded.codec.encode(r.text)
            if r.raw
            else loaded.codec.chat_ids([{"role": "user", "content": r.text}]),
        )
        for r in records
    ]


def category_prompts(
    loaded: LoadedModel, categories: list[str], per_category: int, first_seed: int, max_chars: int
) -> list[Prompt]:
    """`category_texts`, encoded for the target."""
    return encode_prompts(loaded, category_texts(categories, per_category, first_seed, max_chars))


def distinct_split(
    train: list[Prompt], held_out: list[Prompt]
) -> tuple[list[Prompt], list[Prompt], dict[str, int]]:
    """Each prompt once, and no evaluation prompt that training saw. A category's frames draw
    from finite material, so different seeds can render the same prompt (a small category
    repeats after a few seeds): duplicates would be generated and trained on again (greedy
    responses are identical: memorised, not learnt) and would make a 'held-out' score a
    training score."""
    seen: set[tuple[int, ...]] = set()
    kept = []
    for cat, ids in train:
        if tuple(ids) not in seen:
            seen.add(tuple(ids))
            kept.append((cat, ids))
    held, held_seen = [], set()
    for cat, ids in held_out:
        if tuple(ids) not in seen and tuple(ids) not in held_seen:
            held_seen.add(tuple(ids))
            held.append((cat, ids))
    return (
        kept,
        held,
        {
            "prompts_rendered": len(train),
            "prompts_distinct": len(kept),
            "eval_rendered": len(held_out),
            "eval_unseen": len(held),
        },
    )
