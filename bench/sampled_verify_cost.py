"""What a sampled (T > 0) tree verify costs a step, against the host path it replaced.

Served at T = 1 on the H100 the DDTree steps took 5.1-5.4 ms against ~2 ms greedy (docs/dflash.md,
fifth device session). The verify used to copy every node's full-vocabulary distribution to
the host (17 x 49,152 floats a step), normalise it in float64 and walk the tree drawing with
numpy (the anchor here, kept only in this bench). It now draws the nodes' samples on the
logits' device as the walk reaches them, all at once on CUDA, and copies back only the ids
(engine/sampling.RowDraws, verify.verify_tree_sampled). Both on the same random logits and
tree shape (the argmax chain), alternated:

    PYTHONPATH=src .venv/bin/python bench/sampled_verify_cost.py [--device cuda] [--steps 200]

Prints each path's mean ms a step and the ratio (new / anchor).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from specscope.engine.sampling import RowDraws, make_generator, probabilities
from specscope.engine.speculative.tree import chain_tree
from specscope.engine.speculative.verify import verify_tree_sampled


class _HostDraws:
    """The replaced path's draws: numpy, from float64 distributions already on the host."""

    def __init__(self, probs: np.ndarray, rng: np.random.Generator):
        self.probs, self.rng = probs, rng

    def __getitem__(self, node: int) -> int:
        return int(self.rng.choice(self.probs.shape[-1], p=self.probs[node]))


def anchor(logits: torch.Tensor, tree, rng: np.random.Generator, temperature: float) -> list[int]:
    """The replaced host path: every node's distribution to the host in float64, numpy draws on
    the walk (the same walk as the engine's)."""
    probs = probabilities(logits, temperature, 1.0).double().numpy()
    probs /= probs.sum(axis=-1, keepdims=True)
    return verify_tree_sampled(tree, _HostDraws(probs, rng)).committed


def device_draw(logits: torch.Tensor, tree, gen: torch.Generator, temperature: float) -> list[int]:
    """The engine's path: draws on the logits' device as the walk reads them (all at once on
    CUDA), the walk on the host."""
    return verify_tree_sampled(tree, RowDraws(logits, temperature, 1.0, gen)).committed


def timed(fn, steps: int, sync) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    sync()
    return (time.perf_counter() - t0) / steps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--nodes", type=int, default=17, help="tree nodes (DDTree budget 16 + root)")
    ap.add_argument("--vocab", type=int, default=49152, help="SmolLM2's vocabulary")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    logits = torch.randn(args.nodes, args.vocab, generator=torch.Generator().manual_seed(0)) * 4
    logits = logits.to(dev)
    tree = chain_tree(0, logits[:-1].argmax(-1).tolist())  # the argmax chain: walks go deep
    rng, gen = np.random.default_rng(0), make_generator(0)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for fn in (anchor, device_draw):  # warm-up
        fn(logits, tree, rng if fn is anchor else gen, args.temperature)
    old, new = [], []
    for _ in range(args.rounds):
        old.append(timed(lambda: anchor(logits, tree, rng, args.temperature), args.steps, sync))
        new.append(
            timed(lambda: device_draw(logits, tree, gen, args.temperature), args.steps, sync)
        )
    o, n = float(np.median(old)), float(np.median(new))
    print(f"{args.nodes} nodes x {args.vocab} vocabulary on {args.device}, T {args.temperature}")
    print(f"  host float64 walk (anchor)   {o:.3f} ms a step (rounds: {np.round(old, 3).tolist()})")
    print(f"  draws on the logits' device  {n:.3f} ms a step (rounds: {np.round(new, 3).tolist()})")
    print(f"  ratio new / anchor           {n / o:.3f}")


if __name__ == "__main__":
    main()
