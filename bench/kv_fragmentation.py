"""Does a page-size-1, scattered KV cache slow decoding down over a long generation?

Two KV layouts, same model, same prompt, one long greedy generation each (>= 2000 tokens),
their steps interleaved so that machine drift cannot pose as a layout effect:
  A: page_size=1,  scattered  (every token's K/V in a random slot of the pool: worst locality)
  B: page_size=16, contiguous (one adjacent run of slots)
Every step's wall time is recorded. For each layout we fit step_time = a + b * context
(Theil-Sen, robust to the noise of a shared machine), and compare:
- the slopes b (ms per 1000 tokens of context): if scattered pages hurt more as the cache grows,
  b_A exceeds b_B;
- the end-of-generation step time against a FRESH request prefilled to the same context in the
  same layout: output position itself matters only if the generated request is slower than a
  fresh one at equal context ("growth beyond the context trend").

    .venv/bin/python bench/kv_fragmentation.py --layers 4            # CPU, bounded: 4-layer model
    .venv/bin/python bench/kv_fragmentation.py                       # CPU, real SmolLM2 (slow)
    python3 bench/kv_fragmentation.py --device cuda --random-weights # paged kernel, speed only
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch
from scipy.stats import theilslopes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from specscope.backend import SamplingParams
from specscope.engine.backend import EngineBackend
from specscope.engine.factory import assemble
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import SMOLLM2_CONFIG, LoadedModel, load_model, random_model
from specscope.engine.options import EngineOptions

LAYOUTS = [(1, "scattered"), (16, "contiguous")]


def backend_for(lm: LoadedModel, page_size: int, policy: str, pool_tokens: int) -> EngineBackend:
    cfg = lm.config
    kv = KVCache.for_model(
        cfg,
        pool_tokens=pool_tokens // page_size * page_size,
        page_size=page_size,
        policy=policy,
        dtype=lm.dtype,
        device=lm.device,
        seed=1,
    )
    # On CUDA: the paged attention kernel reading the page table (a serving engine's kind of
    # kernel), under CUDA graphs; on CPU: the eager slot gather.
    return assemble(
        lm,
        kv,
        EngineOptions(device=lm.device.type, page_size=page_size, kv_alloc=policy, max_batch=2),
    )


def interleaved(
    backends: list[EngineBackend], prompt: list[int], steps: int, rid: str
) -> list[list[tuple[int, float]]]:
    """Run one request per backend, alternating their steps (and which goes first), so machine
    drift (clocks, neighbours) hits every layout alike. Per backend: (context, step seconds)."""
    for b in backends:
        b.prefill_sync(rid, prompt, SamplingParams(max_tokens=steps, ignore_eos=True))
    traces: list[list[tuple[int, float]]] = [[] for _ in backends]
    for i in range(steps):
        order = range(len(backends)) if i % 2 == 0 else reversed(range(len(backends)))
        for j in order:
            ctx = backends[j].requests[rid].seq.context_len
            traces[j].append((ctx, backends[j].step_sync([rid]).step_s))
    for b in backends:
        b.release(rid)
    return traces


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument(
        "--random-weights", action="store_true", help="SmolLM2 architecture, random weights"
    )
    ap.add_argument("--layers", type=int, default=None, help="random weights with this many layers")
    ap.add_argument("--tokens", type=int, default=2000, help="generated tokens per layout")
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    ap.add_argument("--pool-tokens", type=int, default=65536, help="KV pool size (room to scatter)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.layers:
        lm = random_model(replace(SMOLLM2_CONFIG, num_layers=args.layers), device=args.device)
    elif args.random_weights:
        lm = random_model(device=args.device)
    else:
        lm = load_model(args.model, args.device)
    print(
        f"device={lm.device} dtype={lm.dtype} model={lm.name} layers={lm.config.num_layers} "
        f"prompt={args.prompt} tokens={args.tokens} pool={args.pool_tokens}",
        flush=True,
    )
    prompt = torch.randint(
        100, lm.config.vocab_size, (args.prompt,), generator=torch.Generator().manual_seed(0)
    ).tolist()
    warm = backend_for(lm, 16, "contiguous", 4096)
    interleaved([warm], prompt, 8, "warm")
    backends = [backend_for(lm, ps, pol, args.pool_tokens) for ps, pol in LAYOUTS]
    traces = interleaved(backends, prompt, args.tokens, "gen")
    end_ctx = traces[0][-1][0] + 1
    long_prompt = torch.randint(
        100, lm.config.vocab_size, (end_ctx,), generator=torch.Generator().manual_seed(1)
    ).tolist()
    fresh = interleaved(backends, long_prompt, 16, "fresh")
    results = {}
    for (page_size, policy), trace, fresh_trace in zip(LAYOUTS, traces, fresh, strict=True):
        name = f"page{page_size}-{policy}"
        ctx = [c for c, _ in trace]
        ms = [s * 1e3 for _, s in trace]
        slope, intercept, _, _ = theilslopes(ms, ctx)
        tail = max(1, len(ms) // 10)
        fresh_ms = statistics.median(s for _, s in fresh_trace) * 1e3
        results[name] = {
            "intercept_ms": intercept,
            "slope_ms_per_1k_ctx": slope * 1000,
            "first10pct_median_ms": statistics.median(ms[:tail]),
            "last10pct_median_ms": statistics.median(ms[-tail:]),
            "fresh_at_end_ctx_ms": fresh_ms,
            "end_context": end_ctx,
            "steps": len(ms),
        }
        r = results[name]
        print(
            f"{name:>18}: step = {intercept:.2f} ms + {r['slope_ms_per_1k_ctx']:.3f} ms/1k ctx; "
            f"first 10% {r['first10pct_median_ms']:.2f} ms, last 10% {r['last10pct_median_ms']:.2f} ms; "
            f"fresh request at ctx {end_ctx}: {fresh_ms:.2f} ms",
            flush=True,
        )
    a, b = (results[f"page{p}-{pol}"] for p, pol in LAYOUTS)
    slope_excess = a["slope_ms_per_1k_ctx"] - b["slope_ms_per_1k_ctx"]
    end_ratio = a["last10pct_median_ms"] / b["last10pct_median_ms"]
    beyond_a = a["last10pct_median_ms"] / a["fresh_at_end_ctx_ms"]
    beyond_b = b["last10pct_median_ms"] / b["fresh_at_end_ctx_ms"]
    print(
        f"slope excess of page1-scattered over page16-contiguous: {slope_excess:+.3f} ms per 1k context tokens"
    )
    print(f"end-of-generation step time ratio page1-scattered / page16-contiguous: {end_ratio:.3f}")
    print(
        f"generated / fresh step time at the same context: page1-scattered {beyond_a:.3f}, page16-contiguous {beyond_b:.3f}"
    )
    if args.json:
        summary = {
            "layouts": results,
            "slope_excess_ms_per_1k": slope_excess,
            "end_ratio": end_ratio,
            "generated_over_fresh": {"page1-scattered": beyond_a, "page16-contiguous": beyond_b},
        }
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
