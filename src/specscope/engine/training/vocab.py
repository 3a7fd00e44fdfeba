"""The draft vocabulary a run trains with (`--draft-vocab N`), or gives a trained drafter
(`--draft-vocab-only`), and what the card says of it.

A run counts the target's own responses in its training data: the tokens the drafter learns to
predict (prompts are not labels). A drafter already trained on the whole vocabulary can be
restricted afterwards from the training prompts instead, e.g. a corpus's 44k (the shipped CPU
drafter saw 5k response tokens: too few to rank 16k ids). Either way the card records the size and the
share of training and held-out response tokens the vocabulary holds: a slot whose right token
is outside it is always a miss, which bounds what the drafter can commit.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np
import torch
from safetensors import safe_open

from specscope.engine.loader import LoadedModel
from specscope.engine.speculative import dflash_model
from specscope.engine.speculative.draft_vocab import choose, count_tokens, coverage
from specscope.engine.training.card import write_card
from specscope.engine.training.dataset import Sample
from specscope.engine.training.prompts import Prompt
from specscope.engine.training.target import generate


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
    held = response_counts(held_out, vocab_size) if held_out else None
    return ids, record(ids, size, "training responses", counts, held)


def record(
    ids: np.ndarray,
    requested: int,
    source: str,
    counts: np.ndarray,
    held: np.ndarray | None,
) -> dict[str, Any]:
    """The card's `draft_vocab`: size, where its counts came from, and its coverage of them
    and of the held-out responses' tokens (`held`, counts; None: not measured)."""
    return {
        "size": len(ids),
        "requested": int(requested),
        "counted_from": source,
        "counted_tokens": int(counts.sum()),
        "coverage_counted": round(coverage(ids, counts), 4),
        "coverage_held_out_responses": None if held is None else round(coverage(ids, held), 4),
    }


def restrict_saved(
    args: argparse.Namespace,
    target: LoadedModel,
    prompts: list[Prompt],
    eval_prompts: list[Prompt],
    log=print,
) -> dict[str, Any]:
    """`--draft-vocab-only`: the drafter in `--out` (its weights as trained, in the dtype they
    were saved in) restricted to the `--draft-vocab` most frequent tokens of the run's training
    prompts (`--corpus`'s train split, or the categories'); its config, weights file and card
    rewritten. With held-out prompts, the target's greedy responses to them (`--eval-tokens`)
    give the coverage that matters: of what the drafter will be asked to draft."""
    if args.draft_vocab <= 0:
        raise ValueError("--draft-vocab-only needs --draft-vocab N > 0")
    model = dflash_model.load(args.out)
    vocab_size = model.config.target_vocab_size
    counts = count_tokens((ids for _, ids in prompts), vocab_size)
    ids = choose(counts, args.draft_vocab)
    restricted = dflash_model.with_draft_vocab(model, torch.from_numpy(ids))
    with safe_open(str(args.out / dflash_model.WEIGHTS_FILE), "pt") as saved:  # one tensor read
        saved_dtype = saved.get_tensor("fc.weight").dtype
    dflash_model.save(restricted, args.out, dtype=saved_dtype)
    where = args.corpus.name if args.corpus is not None else "the workload categories"
    source = f"{len(prompts)} training prompts of {where}"
    held = None
    if eval_prompts:
        responses, _ = generate(
            target, [p for _, p in eval_prompts], args.eval_tokens, batch=args.gen_batch
        )
        held = count_tokens(responses, vocab_size)
    rec = record(ids, args.draft_vocab, source, counts, held)
    log(f"draft vocabulary: {json.dumps(rec)}")
    card_path = args.out / "card.json"
    if card_path.exists():
        card = json.loads(card_path.read_text())
        card["drafter"]["draft_vocab_size"] = len(ids)
        card["draft_vocab"] = rec
        card.setdefault("notes", []).append(
            f"restricted after training to {len(ids):,} draft tokens, the most frequent of "
            f"{source} (coverage {rec['coverage_counted']:.1%}) by --draft-vocab-only"
        )
        write_card(args.out, card)
    return rec
