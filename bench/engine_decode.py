"""Decode speed of specscope's engine vs transformers' `generate`, same weights, device, run.

For each context length C: a C-token prompt, then N greedy decode steps at batch 1.
- engine: `EngineBackend.step_sync` (the serving path: batched forward over the paged KV cache,
  sampling, bookkeeping), timed per step;
- transformers: `LlamaForCausalLM.generate` on a model holding OUR tensors, timed per step by a
  logits processor that stamps the clock each time it is called (one call per new token).
Prints step time (median ms) and tok/s for both and the ratio engine/transformers.

    .venv/bin/python bench/engine_decode.py                    # CPU, SmolLM2 from the GGUF
    .venv/bin/python bench/engine_decode.py --contexts 256,1024 --steps 8
    python3 bench/engine_decode.py --device cuda --random-weights   # speed only, no GGUF needed
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

import itertools

from specscope.engine.backend import EngineBackend
from specscope.engine.hf_reference import hf_llama_from
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import LoadedModel, load_model, random_model
from specscope.serve.backend import SamplingParams


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def engine_steps(lm: LoadedModel, prompt: list[int], steps: int, page_size: int) -> list[float]:
    cfg = lm.config
    rows = len(prompt) + steps + 1
    kv = KVCache.for_model(cfg, pool_tokens=rows, page_size=page_size, dtype=lm.dtype,
                           device=lm.device)
    backend = EngineBackend(lm, kv, max_batch=1)
    backend.prefill_sync("r", prompt, SamplingParams(max_tokens=steps, ignore_eos=True))
    times = []
    for _ in range(steps):
        times.append(backend.step_sync(["r"]).step_s)
    backend.release("r")
    return times


def hf_model(lm: LoadedModel):
    return hf_llama_from(lm)


def hf_steps(hf, prompt: list[int], steps: int, device: torch.device) -> list[float]:
    import transformers

    stamps: list[float] = []

    class Stamp(transformers.LogitsProcessor):
        def __call__(self, input_ids, scores):
            sync(device)
            stamps.append(time.perf_counter())
            return scores

    ids = torch.tensor([prompt], device=device)
    with torch.inference_mode():
        hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=steps + 1,
            min_new_tokens=steps + 1,
            do_sample=False,
            logits_processor=transformers.LogitsProcessorList([Stamp()]),
            pad_token_id=0,
        )
    return [b - a for a, b in itertools.pairwise(stamps)]  # first stamp ends prefill


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument(
        "--random-weights", action="store_true", help="SmolLM2 architecture, random weights"
    )
    ap.add_argument("--contexts", default="256,512,1024,2048,4096")
    ap.add_argument(
        "--steps", type=int, default=None, help="decode steps per context (cpu 12, cuda 64)"
    )
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (a busy box: 1)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    steps = args.steps or (64 if args.device == "cuda" else 12)
    lm = (
        random_model(device=args.device)
        if args.random_weights
        else load_model(args.model, args.device)
    )
    hf = hf_model(lm)
    weights = "random (SmolLM2 architecture)" if args.random_weights else lm.name
    print(
        f"device={lm.device} dtype={lm.dtype} weights={weights} steps/context={steps} torch={torch.__version__}"
    )
    gen = torch.Generator().manual_seed(0)
    # Warm-up both paths (allocator, kernels) outside the timings.
    engine_steps(lm, [5] * 32, 3, args.page_size)
    hf_steps(hf, [5] * 32, 3, lm.device)
    rows = []
    print(
        f"{'context':>8} {'engine ms':>10} {'engine tok/s':>13} {'hf ms':>9} {'hf tok/s':>9} {'ratio':>6}"
    )
    for ctx in (int(c) for c in args.contexts.split(",")):
        prompt = torch.randint(100, lm.config.vocab_size, (ctx,), generator=gen).tolist()
        ours = statistics.median(engine_steps(lm, prompt, steps, args.page_size))
        theirs = statistics.median(hf_steps(hf, prompt, steps, lm.device))
        row = {
            "context": ctx,
            "engine_step_ms": ours * 1e3,
            "engine_tok_s": 1 / ours,
            "hf_step_ms": theirs * 1e3,
            "hf_tok_s": 1 / theirs,
            "ratio": theirs / ours,
        }
        rows.append(row)
        print(
            f"{ctx:>8} {row['engine_step_ms']:>10.2f} {row['engine_tok_s']:>13.1f} "
            f"{row['hf_step_ms']:>9.2f} {row['hf_tok_s']:>9.1f} {row['ratio']:>6.2f}",
            flush=True,
        )
    mean_ratio = statistics.fmean(r["ratio"] for r in rows)
    print(f"engine / transformers tok/s ratio, mean over contexts: {mean_ratio:.2f}")
    if args.json:
        args.json.write_text(
            json.dumps({"device": str(lm.device), "weights": weights, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
