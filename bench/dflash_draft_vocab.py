"""What a DFlash draft vocabulary of each size holds and what its LM head costs, against the
whole vocabulary in the same run (engine/speculative/draft_vocab.py; docs/dflash.md).

Per size: the vocabulary `choose` takes from the corpus's training prompts (what
`train_dflash --draft-vocab-only --corpus` counts), its coverage of those tokens and of the
target's greedy responses to each held-out set (a drafted slot whose right token lies outside
is always a miss), and the head's time over the drafter's slots (`DraftHead.logits` +
log-softmax + top-k, the block step's tail) against the whole head's, rounds alternating.

    PYTHONPATH=src .venv/bin/python bench/dflash_draft_vocab.py --threads 1
    PYTHONPATH=src .venv/bin/python bench/dflash_draft_vocab.py --sizes 8192,16384 --skip-held-out
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from specscope.engine.loader import load_model
from specscope.engine.speculative.draft_vocab import DraftHead, choose, count_tokens, coverage
from specscope.engine.training.corpus import read_corpus
from specscope.engine.training.prompts import encode_corpus
from specscope.engine.training.target import generate

HELD_OUT = ("bench/data/dflash/heldout_code.jsonl", "bench/data/dflash/heldout_chat.jsonl")


def head_ms(head: DraftHead, hidden: torch.Tensor, rounds: int) -> list[float]:
    """ms of the block step's tail over `hidden` [slots, D], one per round (after a warm-up)."""
    out = []
    for r in range(rounds + 1):
        t0 = time.perf_counter()
        logp = torch.log_softmax(head.logits(hidden).float(), dim=-1)
        torch.topk(logp, 8, dim=-1)
        if r:
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=Path(".dflash/corpus.jsonl.gz"))
    ap.add_argument("--sizes", default="8192,16384,24576,32768")
    ap.add_argument("--slots", type=int, default=7, help="draft slots a block (the CPU drafter's)")
    ap.add_argument("--tokens", type=int, default=96, help="greedy tokens a held-out response")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-held-out", action="store_true", help="no target generation")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not args.corpus.is_file():
        sys.exit(f"{args.corpus}: no corpus (bash bench/device/prepare.sh dflash builds it)")
    lm = load_model("smollm2")
    vocab = lm.config.vocab_size
    train = [r for r in read_corpus(args.corpus) if r.split == "train"]
    counts = count_tokens((ids for _, ids in encode_corpus(lm, train)), vocab)
    held = {}
    if not args.skip_held_out:
        for name in HELD_OUT:
            prompts = [ids for _, ids in encode_corpus(lm, read_corpus(Path(name)))]
            responses, _ = generate(lm, prompts, args.tokens, batch=16)
            held[Path(name).stem] = count_tokens(responses, vocab)
    weight = lm.model.lm_head.weight.detach()
    hidden = torch.randn(args.slots, weight.shape[1], generator=torch.Generator().manual_seed(0))
    sizes = [int(s) for s in args.sizes.split(",") if s]
    heads = {0: DraftHead(weight, None)}
    heads.update({n: DraftHead(weight, torch.from_numpy(choose(counts, n))) for n in sizes})
    times: dict[int, list[float]] = {n: [] for n in heads}
    for r in range(2):  # alternating order: a load drift favours no size
        for n in list(heads) if r == 0 else list(heads)[::-1]:
            times[n] += head_ms(heads[n], hidden, args.rounds)
    whole_ms = statistics.median(times[0])
    print(f"{len(train)} training prompts, {int(counts.sum()):,} tokens, {int((counts > 0).sum()):,} ids occur; "
          f"head over {args.slots} slots, {args.threads} thread(s)")  # fmt: skip
    rows = []
    for n, head in heads.items():
        ids = head.ids.numpy() if head.ids is not None else torch.arange(vocab).numpy()
        ms = statistics.median(times[n])
        row = {
            "size": n or vocab,
            "ids": len(ids),
            "coverage_corpus": round(coverage(ids, counts), 4),
            **{f"coverage_{k}": round(coverage(ids, c), 4) for k, c in held.items()},
            "head_ms": round(ms, 2),
            "head_vs_whole": round(ms / whole_ms, 3),
        }
        rows.append(row)
        print("  " + "  ".join(f"{k} {v}" for k, v in row.items()))
    if 16384 in heads and held:  # what the shipped size leaves out, and how rare it was
        missed = sum(held.values())
        missed[heads[16384].ids.numpy()] = 0
        top = missed.argsort()[::-1][:10]
        print("  held-out tokens outside 16,384 (held-out count / corpus count): " + ", ".join(
            f"{lm.codec.decode([int(t)])!r} {int(missed[t])}/{int(counts[t])}" for t in top if missed[t]
        ))  # fmt: skip
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args) | {"corpus": str(args.corpus)}, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
