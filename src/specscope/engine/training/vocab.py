"""The draft vocabulary a run trains with (`--draft-vocab N`), or gives a trained drafter
(`--draft-vocab-only`), and what the card says of it.

A run counts the target's own responses in its training data: the tokens the drafter learns to
predict (prompts are not labels). A drafter already trained on the whole vocabulary can be
restricted afterwards from a corpus's training prompts instead (the shipped CPU drafter saw
5k response tokens: too few to rank 16k ids). Either way the card records the size and the
share of training and held-out response tokens the vocabulary holds: a slot whose right token
is outside it is always a miss, which bounds what the drafter can commit.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from specscope.engine.loader import LoadedModel
from specscope.engine.speculative import dflash_model
from specscope.engine.speculative.draft_vocab import choose, count_tokens, coverage
from specscope.engine.training.card import write_card
from specscope.engine.training.corpus import read_corpus
from specscope.engine.training.dataset import Sample
from specscope.engine.training.prompts import encode_corpus


def response_counts(samples: list[Sample], vocab_size: int) -> np.ndarray:
    """Token counts over the samples' responses (what the drafter's slots are trained on)."""
    return count_tokens((s.tokens[s.prompt_len :] for s in samples), vocab_size)


def for_run(
    size: int, vocab_size: int, data: list[Sample], held_out: list[Sample]
) -> tuple[np.ndarray | None, dict[str, Any] | None]:
    """(ids, the card's record) of `--draft-vocab size` from the training responses; (None,
    None) for size 0, the whole vocabulary."""
    if size <= 0:
        return None, None
    counts = response_counts(data, vocab_size)
    ids = choose(counts, size)
    return ids, record(ids, size, "training responses", counts, held_out, vocab_size)


def record(
    ids: np.ndarray,
    requested: int,
    source: str,
    counts: np.ndarray,
    held_out: list[Sample],
    vocab_size: int,
) -> dict[str, Any]:
    """The card's `draft_vocab`: size, where its counts came from, and coverage."""
    held = response_counts(held_out, vocab_size) if held_out else None
    return {
        "size": len(ids),
        "requested": int(requested),
        "counted_from": source,
        "counted_tokens": int(counts.sum()),
        "coverage_counted": round(coverage(ids, counts), 4),
        "coverage_held_out_responses": None if held is None else round(coverage(ids, held), 4),
    }


def restrict_saved(args: argparse.Namespace, target: LoadedModel, log=print) -> dict[str, Any]:
    """`--draft-vocab-only`: the drafter in `--out` (kept as trained) restricted to the
    `--draft-vocab` most frequent tokens of `--corpus`'s training prompts; its config, weights
    file and card rewritten."""
    if args.corpus is None or args.draft_vocab <= 0:
        raise ValueError("--draft-vocab-only needs --corpus FILE and --draft-vocab N > 0")
    model = dflash_model.load(args.out)
    vocab_size = model.config.target_vocab_size
    records = [r for r in read_corpus(args.corpus) if r.split == "train"]
    records = records[: args.max_prompts or None]
    counts = count_tokens((ids for _, ids in encode_corpus(target, records)), vocab_size)
    ids = choose(counts, args.draft_vocab)
    restricted = dflash_model.DFlashDraftModel(replace(model.config, draft_vocab_size=len(ids)))
    state = {k: v for k, v in model.state_dict().items() if k != "draft_vocab"}
    restricted.load_state_dict({**state, "draft_vocab": torch.from_numpy(ids)})
    card_path = args.out / "card.json"
    card = json.loads(card_path.read_text()) if card_path.exists() else None
    dtype = torch.bfloat16 if (card or {}).get("save_dtype", "bfloat16") == "bfloat16" else None
    dflash_model.save(restricted, args.out, dtype=dtype or torch.float32)
    source = f"{len(records)} training prompts of {args.corpus.name}"
    rec = record(ids, args.draft_vocab, source, counts, [], vocab_size)
    log(f"draft vocabulary: {json.dumps(rec)}")
    if card is not None:
        card["drafter"]["draft_vocab_size"] = len(ids)
        card["draft_vocab"] = rec
        card.setdefault("notes", []).append(
            f"restricted after training to {len(ids):,} draft tokens, the most frequent of "
            f"{source} (coverage {rec['coverage_counted']:.1%}) by --draft-vocab-only"
        )
        write_card(args.out, card)
    return rec
