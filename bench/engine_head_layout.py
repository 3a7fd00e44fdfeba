"""The LM head's price on the CPU by weight layout: what a verify of k tokens pays for its logits.

Why: on this CPU a speculative verify of 8 tokens costs ~2x a plain step, and the head (the
vocabulary x hidden matrix, tied to the embedding table in SmolLM2) is most of the difference:
MKL's GEMM over a few rows of a 49,152 x 576 fp32 matrix stored row-major (`F.linear(x, W)`,
what the engine does) runs well below the machine's rate. The same product against a contiguous
copy of W's transpose (`x @ W.T.contiguous()`) is one candidate; it costs a second copy of the
table (or a column gather for the embedding lookup). bf16 (`--dtypes`) prices the other: the
head in bf16 (half the table's bytes; argmax ties may then break differently from fp32).
Anchor: the first dtype's F.linear in the same run, rounds interleaved so that a load change
does not favour either; printed: per layout and rows, the best round's mean ms and the ratio
against the anchor. Random weights of the head's shape (the layout, not the values,
sets the time); no thresholds.

    .venv/bin/python bench/engine_head_layout.py [--rows 1,5,8] [--dtypes float32,bfloat16]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F


def mean_ms(fn: Callable[[], torch.Tensor], calls: int) -> float:
    """Mean ms of `calls` calls after one untimed call."""
    fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", default="1,5,8", help="comma list: tokens a step (1 = plain)")
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--dtypes", default="float32,bfloat16", help="comma list; the first anchors")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=30, help="timed calls per layout and round")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = [int(r) for r in args.rows.split(",") if r]
    dtypes = [d for d in args.dtypes.split(",") if d]
    weight = torch.randn(args.vocab, args.hidden)
    heads = {
        d: (weight.to(getattr(torch, d)), weight.T.contiguous().to(getattr(torch, d)))
        for d in dtypes
    }
    best: dict[tuple[int, str], float] = {}
    for _ in range(args.rounds):
        for n in rows:
            x = torch.randn(n, args.hidden)
            for d, (w, w_t) in heads.items():
                xd = x.to(w.dtype)
                for name, fn in (
                    (f"{d} F.linear(x, W)", lambda xd=xd, w=w: F.linear(xd, w)),
                    (f"{d} x @ W.T", lambda xd=xd, w_t=w_t: xd @ w_t),
                ):
                    ms = mean_ms(fn, args.calls)
                    best[(n, name)] = min(ms, best.get((n, name), ms))
    anchor_name = f"{dtypes[0]} F.linear(x, W)"
    print(
        f"head {args.vocab} x {args.hidden}, {args.threads} thread(s), best of {args.rounds} "
        f"rounds; ratio against {anchor_name} in this run"
    )
    for n in rows:
        anchor = best[(n, anchor_name)]
        cells = [
            f"{name} {ms:7.2f} ms ({ms / anchor:4.2f})" for (r, name), ms in best.items() if r == n
        ]
        print(f"{n:>2} rows | " + " | ".join(cells))


if __name__ == "__main__":
    main()
