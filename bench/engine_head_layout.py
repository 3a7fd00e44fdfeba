"""The LM head's price on the CPU by weight layout: what a verify of k tokens pays for its logits.

Why: on this CPU a speculative verify of 8 tokens costs ~2x a plain step, and the head (the
vocabulary x hidden matrix, tied to the embedding table in SmolLM2) is most of the difference:
MKL's GEMM over a few rows of a 49,152 x 576 fp32 matrix stored row-major (`F.linear(x, W)`,
what the engine does) runs well below the machine's rate. The same product against a contiguous
copy of W's transpose (`x @ W.T.contiguous()`) is one candidate; it costs a second copy of the
table (or a column gather for the embedding lookup). `--dtype bfloat16` prices the other: the
head in bf16 (half the table's bytes; argmax ties may then break differently from fp32). Anchor: F.linear in the same run, rounds
interleaved so that a load change does not favour either; printed: best ms per layout and rows,
and the ratio against the anchor. Random weights of the head's shape (the layout, not the values,
sets the time); no thresholds.

    .venv/bin/python bench/engine_head_layout.py [--rows 1,5,8] [--vocab 49152] [--hidden 576]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F


def best_ms(fn: Callable[[], torch.Tensor], calls: int) -> float:
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
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=30, help="timed calls per layout and round")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    weight = torch.randn(args.vocab, args.hidden).to(dtype)
    weight_t = weight.T.contiguous()
    rows = [int(r) for r in args.rows.split(",") if r]
    best: dict[tuple[int, str], float] = {}
    for _ in range(args.rounds):
        for n in rows:
            x = torch.randn(n, args.hidden).to(dtype)
            layouts = {
                "F.linear(x, W)": lambda x=x: F.linear(x, weight),
                "x @ W.T": lambda x=x: x @ weight_t,
            }
            for name, fn in layouts.items():
                ms = best_ms(fn, args.calls)
                best[(n, name)] = min(ms, best.get((n, name), ms))
    print(
        f"head {args.vocab} x {args.hidden} {args.dtype}, {args.threads} thread(s), "
        f"best of {args.rounds} rounds"
    )
    print(f"{'rows':>4} | {'F.linear ms':>11} | {'x @ W.T ms':>10} | ratio")
    for n in rows:
        anchor, other = best[(n, "F.linear(x, W)")], best[(n, "x @ W.T")]
        print(f"{n:>4} | {anchor:11.2f} | {other:10.2f} | {other / anchor:5.2f}")


if __name__ == "__main__":
    main()
