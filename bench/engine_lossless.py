"""Losslessness of the engine's fast path and of speculation, on the device asked for.

1. fast path vs eager: the same batch (decode, and tree verification under a tree mask) through
   the CUDA-graph runner and through the eager runner, over one shared KV pool state: max |diff|
   of logits, and argmax agreement; fresh prompts' prefill (the compiled path) against the
   eager forward: max |diff| of the K/V written;
2. fp32: greedy output with speculation (n-gram chain / tree, early-exit drafter tree; page 16
   contiguous and page 1 scattered, in-place tree KV) equals plain greedy output, token for token;
3. bf16: the same comparison, reported, not required (batched verification changes rounding):
   the share of identical tokens;
4. overlapped plain steps (engine/overlap.py, driven by serve's StepLoop: the next step fed
   from the device before the host reads this one) against synchronous ones, requests of
   different lengths and two arriving late: identical in fp32 (required), reported in bf16.
Exits 1 when a check of 1, 2 or 4 fails.

    python3 bench/engine_lossless.py --device cuda --random-weights
    .venv/bin/python bench/engine_lossless.py --tiny           # CPU, a tiny random model
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from specscope.backend import SamplingParams
from specscope.engine.factory import assemble
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import TINY_CONFIG, load_model, random_model
from specscope.engine.options import EngineOptions, SpeculationOptions
from specscope.engine.runner import EagerRunner, Work

SPECS = [
    (
        "ngram chain k=4",
        SpeculationOptions(drafter="ngram", verify="chain", num_draft_tokens=4, ngram_min=1),
        16,
        "contiguous",
    ),
    (
        "ngram tree B=16",
        SpeculationOptions(drafter="ngram", verify="tree", budget=16, ngram_min=1),
        16,
        "scattered",
    ),
    (
        "ngram tree B=8 inplace",
        SpeculationOptions(
            drafter="ngram", verify="tree", budget=8, ngram_min=1, tree_kv="inplace"
        ),
        1,
        "scattered",
    ),
    (
        "layers:2 tree B=12",
        SpeculationOptions(drafter="layers:2", verify="tree", budget=12),
        16,
        "contiguous",
    ),
]


def prompts_for(vocab: int, n: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        base = torch.randint(3, vocab, (12 + 5 * i,), generator=g).tolist()
        out.append(base * 3 + base[: 4 + i])  # repeats: n-gram drafts find matches
    return out


def decode(lm, spec, page, policy, prompts, max_tokens, cuda_graphs=True):
    kv = KVCache.for_model(
        lm.config,
        pool_tokens=8192 // page * page,
        page_size=page,
        policy=policy,
        dtype=lm.dtype,
        device=lm.device,
    )
    be = assemble(
        lm,
        kv,
        EngineOptions(
            device=lm.device.type,
            page_size=page,
            kv_alloc=policy,
            max_batch=len(prompts),
            speculation=spec,
            cuda_graphs=cuda_graphs,
        ),
    )
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    ids = [f"r{i}" for i in range(len(prompts))]
    be.prefill_many_sync([(r, p, params) for r, p in zip(ids, prompts, strict=True)])
    out: dict[str, list[int]] = {r: [] for r in ids}
    longest = 0
    for _ in range(4 * max_tokens):
        live = [r for r in ids if not be.requests[r].finished]
        if not live:
            break
        for o in be.step_sync(live).outputs:
            out[o.request_id] += o.tokens
            longest = max(longest, len(o.tokens))
    for r in ids:
        be.release(r)
    assert kv.free_pages == kv.num_pages, "pages leaked"
    return [out[r] for r in ids], longest


def decode_stepped(lm, prompts, max_tokens, overlap: bool) -> tuple[list[list[int]], int]:
    """Plain greedy decoding driven as `serve` drives it (StepLoop: admission, steps, frees),
    overlapped or not; requests end at different steps and the last two arrive after three
    passes. Returns each request's tokens and how many overlapped steps were finished."""
    from collections import deque

    from specscope.serve.scheduler import RequestState
    from specscope.serve.step_thread import StepLoop

    kv = KVCache.for_model(
        lm.config, pool_tokens=8192, page_size=16, dtype=lm.dtype, device=lm.device
    )
    opts = EngineOptions(device=lm.device.type, max_batch=len(prompts), overlap=overlap)
    be = assemble(lm, kv, opts)
    finished = {"n": 0}
    finish = be.finish_locked

    def counted(launched):
        finished["n"] += 1
        return finish(launched)

    be.finish_locked = counted
    states = [
        RequestState(f"r{i}", p, SamplingParams(max_tokens=max_tokens - 5 * i, ignore_eos=True))
        for i, p in enumerate(prompts)
    ]
    waiting = deque(states[:-2])
    loop = StepLoop(be, waiting, max_batch=len(prompts))
    out: dict[str, list[int]] = {s.request_id: [] for s in states}
    for passes in range(8 * max_tokens):
        if passes == 3:
            waiting.extend(states[-2:])
        if passes > 3 and not loop.busy:
            break
        report = loop.run_pass()
        assert report.error is None, report.error
        for o in report.batch.outputs if report.batch else []:
            out[o.request_id] += o.tokens
    assert kv.free_pages == kv.num_pages, "pages leaked"
    return [out[s.request_id] for s in states], finished["n"]


def overlap_check(lm, prompts, max_tokens) -> bool:
    """Check 4: overlapped steps against synchronous ones, the same schedule."""
    want, _ = decode_stepped(lm, prompts, max_tokens, overlap=False)
    got, overlapped = decode_stepped(lm, prompts, max_tokens, overlap=True)
    same = sum(a == b for g, w in zip(got, want, strict=True) for a, b in zip(g, w, strict=False))
    lengths = [len(g) for g in got] == [len(w) for w in want]
    exact = got == want
    total = sum(len(w) for w in want)
    print(
        f"overlap vs synchronous    plain greedy     : identical {exact}, {same}/{total} "
        f"tokens, lengths equal {lengths}, overlapped steps {overlapped}",
        flush=True,
    )
    return (exact or lm.dtype != torch.float32) and lengths and overlapped > 0


def fast_vs_eager(lm) -> bool:
    """Same KV state, same new tokens: the graph runner's logits against the eager runner's."""
    kv = KVCache.for_model(
        lm.config,
        pool_tokens=4096,
        page_size=16,
        policy="scattered",
        dtype=lm.dtype,
        device=lm.device,
    )
    be = assemble(
        lm,
        kv,
        EngineOptions(
            device="cuda",
            max_batch=4,
            speculation=SpeculationOptions(drafter="ngram", verify="tree", budget=8),
        ),
    )
    eager = EagerRunner(lm.model, kv)
    prompts = prompts_for(lm.config.vocab_size, 3)
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    be.prefill_many_sync([(f"r{i}", p, params) for i, p in enumerate(prompts)])
    seqs = [be.requests[f"r{i}"].seq for i in range(3)]
    mask = np.tril(np.ones((5, 5), dtype=bool))
    mask[2, 1] = mask[3, 1] = mask[4, 1] = False  # two branches under the root
    ok = True
    for name, work in [
        ("decode", [Work(s, [7]) for s in seqs]),
        (
            "tree verify",
            [
                Work(s, [7, 8, 9, 10, 11], [s.context_len + d for d in (0, 1, 1, 2, 3)], mask)
                for s in seqs
            ],
        ),
    ]:
        results = []
        for runner in (be.runner, eager):
            _, logits = runner.forward(work)
            results.append((logits.tensor[:, : len(work[0].tokens)].clone(), logits.argmax()))
            for s in seqs:
                kv.truncate(s, s.context_len)
        diff = (results[0][0] - results[1][0]).abs().max().item()
        scale = results[1][0].abs().max().item()
        agree = results[0][1] == results[1][1]
        tol = 1e-3 if lm.dtype == torch.float32 else 0.1
        ok &= diff <= tol * max(1.0, scale) and (agree or lm.dtype != torch.float32)
        print(
            f"fast vs eager, {name}: max |diff| {diff:.2e} (logit scale {scale:.1f}), argmax equal: {agree}"
        )
    for i in range(3):
        be.release(f"r{i}")
    return prefill_vs_eager(lm, kv, be.runner, eager, prompts[:2]) and ok


def prefill_vs_eager(lm, kv, fast, eager, prompts) -> bool:
    """Fresh prompts of different lengths in one forward: the K/V the fast path's prefill
    (engine/cuda/prefill.py: the compiled token-wise functions, causal SDPA) writes against
    the eager forward's, every layer."""
    seqs = {path: [kv.admit(f"{path}{i}", 256) for i in range(len(prompts))] for path in "fe"}
    for path, runner in (("f", fast), ("e", eager)):
        work = [Work(s, p) for s, p in zip(seqs[path], prompts, strict=True)]
        runner.forward(work, False)
        for w in work:
            kv.commit(w.seq, len(w.tokens))
    diff = scale = 0.0
    for f, e in zip(seqs["f"], seqs["e"], strict=True):
        rows_f, rows_e = kv.context_slots(f), kv.context_slots(e)
        for pool in (kv.k, kv.v):
            for layer in pool:
                want = layer[rows_e].float()
                diff = max(diff, (layer[rows_f].float() - want).abs().max().item())
                scale = max(scale, want.abs().max().item())
    for path in "fe":
        for i in range(len(prompts)):
            kv.release(f"{path}{i}")
    tol = 1e-3 if lm.dtype == torch.float32 else 0.1
    print(f"fast vs eager, prefill K/V: max |diff| {diff:.2e} (scale {scale:.2e})")
    return diff <= tol * scale


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument(
        "--random-weights", action="store_true", help="SmolLM2 architecture, random weights"
    )
    ap.add_argument("--tiny", action="store_true", help="a tiny random model (fast, any device)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=4)
    args = ap.parse_args()
    failed = False
    for dtype in (torch.float32, torch.bfloat16):
        if args.tiny:
            lm = random_model(TINY_CONFIG, device=args.device, dtype=dtype)
        elif args.random_weights:
            lm = random_model(device=args.device, dtype=dtype)
        else:
            lm = load_model(args.model, device=args.device, dtype=dtype)
        name = str(dtype).removeprefix("torch.")
        print(f"== {name}, {lm.name}, {lm.device}", flush=True)
        if args.device == "cuda" and not fast_vs_eager(lm) and dtype == torch.float32:
            failed = True
        prompts = prompts_for(lm.config.vocab_size, args.prompts)
        plain, _ = decode(lm, None, 16, "contiguous", prompts, args.max_tokens)
        for label, spec, page, policy in SPECS:
            got, longest = decode(lm, spec, page, policy, prompts, args.max_tokens)
            same = sum(
                a == b for g, p in zip(got, plain, strict=True) for a, b in zip(g, p, strict=False)
            )
            total = sum(len(p) for p in plain)
            exact = got == plain
            line = f"{label:<24} page {page:>2} {policy:<10}: identical {exact}, {same}/{total} tokens, longest commit {longest}"
            print(line, flush=True)
            if dtype == torch.float32 and not exact:
                failed = True
        if not overlap_check(lm, prompts_for(lm.config.vocab_size, 6), args.max_tokens):
            failed = True
    print("FAILED" if failed else "all fp32 checks passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
