"""A drafter's window against a copy from far back: the `prose-edit` workload's case.

One prose-edit prompt of about N tokens (the article, then the answer started with its first
sentence: the model re-emits the text from its start), generated greedily on the engine with the
n-gram drafter twice, without a window and with `--draft-window W`; prints tokens per verify step
for each and their ratio (same text both times: the drafter does not change the output).

    .venv/bin/python bench/far_copy.py [--prompt-tokens 2700] [--max-tokens 150] [--window 1024]
        [--seed 0] [--device cpu]

Measured on this CPU (2026-12-03, defaults, docs/faults.md): 4.55 tokens a step without the
window, 1.00 with W=1024 (2,700-token prompt, 150 tokens; 51 s).
"""

from __future__ import annotations

import argparse
import asyncio

from specscope.backend import SamplingParams
from specscope.engine.factory import build_backend
from specscope.probe.prompts import fit_units, local_async
from specscope.probe.workloads.categories import prose_edit


def _tokens_per_step(backend, ids: list[int], max_tokens: int) -> float:
    backend.prefill_sync("r", ids, SamplingParams(max_tokens=max_tokens))
    steps = tokens = 0
    while True:
        out = backend.step_sync(["r"]).outputs[0]
        steps, tokens = steps + 1, tokens + len(out.tokens)
        if out.finished:
            break
    backend.release("r")
    return tokens / steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt-tokens", type=int, default=2700)
    ap.add_argument("--max-tokens", type=int, default=150)
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    rates = {}
    for name, window in (("no window", None), (f"window {args.window}", args.window)):
        backend = build_backend(device=args.device, drafter="ngram", draft_window=window)
        count = local_async(lambda text, b=backend: len(b.tokenize(text)))
        built, _ = asyncio.run(fit_units(count, prose_edit(args.seed), args.prompt_tokens))
        ids = backend.tokenize(built.text)
        rates[name] = _tokens_per_step(backend, ids, args.max_tokens)
        print(f"{name:>12}: {len(ids)}-token prompt, {rates[name]:.2f} tokens per verify step")
    first, second = rates.values()
    print(f"ratio (no window / window): {first / second:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
