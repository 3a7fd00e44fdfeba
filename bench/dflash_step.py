"""One DFlash drafter step at batch 1, per path: the context update (the k rows a verify
accepted) and the block propose, against the previous path measured in the same run.

Why: on the H200 the drafter's eager step cost 2.1-2.6 ms (propose) + 0.9-1.1 ms (update)
against a 0.77 ms plain target step (issue #39's text, from `bench/engine_spec.py --device cuda`
on 2026-12-02; item 4 asks both together <= 0.3 ms). Paths
(engine/speculative/dflash.py): "growing" (the previous store, torch.cat per update: the
anchor), "ring" (the fixed-size in-place store, eager: the CPU's and --eager's path), "static"
(the functions the graphs capture, run eagerly over the whole capacity), "graph" (CUDA only:
both parts replayed as CUDA graphs; the engine's CUDA path).

Per path: a request observes --context rows (a prefill, untimed), then --steps steps of
observe(--accept rows) + propose(B-1 drafts), the device synchronised around each part. Rounds
alternate the path order (a load drift on a shared machine favours no path); figures are medians
over all steps. Printed per path: update ms, propose ms, step ms and step / anchor ("growing").
Absolute figures mean something on the H200 only; on a CPU read the ratios.

--check (exits 1 on a mismatch): one script of updates (1..B rows), proposals, a window wrap
and a released store reused by a second request, run on every path; "ring" and "static" are
compared with "growing", "graph" (CUDA) with "static": the sorted top-k log-probs within
tolerance and the chains equal except at a near-tie of the reference's two best (1e-3 in
float32, 5e-2 in bfloat16: one bf16 step of a logit; the largest gap is printed, and "graph"
against "static", the same kernels replayed, should show 0; "graph+compile", the same functions
fused by torch.compile, is compared with "static" too: small gaps, from fused arithmetic).
On CUDA both captured paths are timed, uncompiled and compiled, with their ratio: the eager
functions replay ~250 kernels a step (--count-ops), so fusing them is what item 4's 0.3 ms needs.

    PYTHONPATH=src .venv/bin/python bench/dflash_step.py --random-weights --shape tiny
    PYTHONPATH=src .venv/bin/python bench/dflash_step.py --random-weights --threads 1
    PYTHONPATH=src .venv/bin/python bench/dflash_step.py --check --random-weights --shape tiny
    python3 bench/dflash_step.py --device cuda --random-weights --check           # H200
    python3 bench/dflash_step.py --device cuda --random-weights --steps 300       # H200
    python3 bench/dflash_step.py --device cuda --random-weights --check --draft-vocab 16384
    python3 bench/dflash_step.py --device cuda --random-weights --layers-block 2,16 --steps 200
    PYTHONPATH=src .venv/bin/python bench/dflash_step.py --random-weights --shape tiny --compile
    PYTHONPATH=src .venv/bin/python bench/dflash_step.py --random-weights --layers-block 2,16 \
        --count-ops          # the ops a captured step replays, one small kernel each
    python3 bench/dflash_step.py --device cuda --random-weights --layers-block 2,16 \
        --profile graph+compile   # where a captured step's time goes (below)
    python3 bench/dflash_step.py --device cuda --random-weights --layers-block 2,16 \
        --profile graph+compile --attention sdpa --sdpa math   # SDPA's math kernels

--attention: the block's attention, grouped bf16 matmuls (the engine's default on CUDA since the
sixth device session: 0.203 ms of device time a step against 0.267 with cuDNN's fused kernel
and the earlier step, H100) or SDPA's kernels (then --sdpa picks them; the CPU's default). On the staged paths the
"update" part is the staging (a copy of the rows) and the propose writes them.

--profile PATH: --steps steps of that path under torch.profiler (the GPU's kernels too, replayed
graphs included): per step, its wall time against the time the device was busy and the
kernels it ran, and the top kernels. The second session's compiled step took 0.63 ms where
the done-when asks 0.3: busy time near the wall time means kernels to cut (fewer, fused);
much less means the host (Python around the replay, input copies, the wait for the top-k).

--draft-vocab N (random weights): the drafter drafts over N token ids (its LM head cut to those
rows, engine/speculative/draft_vocab.py); the shipped drafter drafts over its own vocabulary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from specscope.engine.loader import SMOLLM2_CONFIG, TINY_CONFIG, load_model, random_model
from specscope.engine.options import DRAFT_ATTENTION
from specscope.engine.speculative import dflash_model
from specscope.engine.speculative.dflash import DFlashDrafter
from specscope.engine.speculative.drafter import Draft, DraftRequest

SHAPES = {"tiny": TINY_CONFIG, "smollm2": SMOLLM2_CONFIG}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def models(args: argparse.Namespace):
    """(target, drafter module): the shipped SmolLM2 pair, or random weights of a shape (the
    shipped drafter's config for SmolLM2's shape; one layer, block 8 for the tiny one)."""
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(args.dtype or "")
    if not args.random_weights:
        target = load_model("smollm2", device=args.device, dtype=dtype)
        path = dflash_model.resolve_path("smollm2")
        return target, dflash_model.load(path, device=target.device, dtype=target.dtype)
    target = random_model(SHAPES[args.shape], device=args.device, dtype=dtype, seed=1)
    if args.shape == "smollm2":
        raw = json.loads((dflash_model.resolve_path("smollm2") / "config.json").read_text())
        cfg = dflash_model.DFlashConfig(**raw)
    else:
        cfg = dflash_model.DFlashConfig.for_target("tiny", target.config, block_size=8)
    if args.layers_block:  # the GPU preset's drafter (2,16) rather than the shipped one's
        layers, block = (int(v) for v in args.layers_block.split(","))
        cfg = replace(cfg, num_layers=layers, block_size=block)
    model = dflash_model.DFlashDraftModel(replace(cfg, draft_vocab_size=args.draft_vocab))
    model.init_weights(seed=2, embed_std=1.0)
    if args.draft_vocab:  # a seeded random subset: the head's cost is its row count
        g = torch.Generator().manual_seed(3)
        ids = torch.randperm(cfg.target_vocab_size, generator=g)[: args.draft_vocab]
        model.draft_vocab.copy_(ids.sort().values)
    for p in model.parameters():  # as the tests do: drafts that depend visibly on the context,
        if p.dim() == 2:  # so that --check sees one wrong context row
            p.data.mul_(10)
    return target, model.to(target.device, target.dtype).eval()


def drafter(target, model, path: str, window: int | None, args) -> DFlashDrafter:
    """The drafter on `path`; "graph+compile" / "static+compile": that path's functions fused
    by torch.compile first (the engine's CUDA default)."""
    base, _, fused = path.partition("+")
    d = DFlashDrafter(
        model,
        target.model,
        top_k=args.top_k,
        draft_window=window,
        path=base,
        compile=bool(fused),
        attention=args.attention,
    )
    d.warmup()  # the graph path captures here, as the engine does at build
    return d


def inputs(target, model, rows: int, seed: int) -> tuple[torch.Tensor, list[int]]:
    """Tapped target rows (random, the target's scale) and token ids for one request."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, model.fc.in_features, generator=g)
    tokens = torch.randint(0, target.config.vocab_size, (rows + 1,), generator=g).tolist()
    return hidden.to(target.device, target.dtype), tokens


def time_round(d, target, model, args, rid: str) -> dict[str, list[float]]:
    """Prefill --context rows, then --steps timed steps of update + propose."""
    dev, k = target.device, args.accept
    hidden, tokens = inputs(target, model, args.context + args.steps * k, seed=0)
    d.observe(rid, hidden[: args.context])
    seen, out = args.context, {"update": [], "propose": []}
    for _ in range(args.steps):
        sync(dev)
        t0 = time.perf_counter()
        d.observe(rid, hidden[seen : seen + k])
        sync(dev)
        t1 = time.perf_counter()
        seen += k
        d.propose([DraftRequest(rid, tokens[: seen + 1], d.max_depth)])  # syncs: .cpu()
        t2 = time.perf_counter()
        out["update"].append(t1 - t0)
        out["propose"].append(t2 - t1)
    d.release(rid)
    return out


# Ops that launch no kernel of their own: views, metadata, allocation.
NO_KERNEL = {
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::resize_", "aten::view",
    "aten::as_strided", "aten::_reshape_alias", "aten::reshape", "aten::_unsafe_view",
    "aten::unsqueeze", "aten::squeeze", "aten::expand", "aten::slice", "aten::select",
    "aten::t", "aten::transpose", "aten::permute", "aten::split", "aten::narrow", "aten::unbind",
    "aten::chunk", "aten::unflatten", "aten::flatten", "aten::detach", "aten::alias",
    "aten::lift_fresh", "aten::resolve_conj", "aten::resolve_neg", "aten::result_type",
    "aten::contiguous", "aten::item", "aten::_local_scalar_dense", "aten::is_nonzero",
    "aten::to", "aten::_to_copy",  # a cast launches its copy_, counted; a no-op cast nothing
}  # fmt: skip


def count_ops(d: DFlashDrafter, target, model, args) -> dict[str, dict[str, int]]:
    """Per part (update, propose), the ops of one step that would each launch a kernel: the
    innermost ones, those whose own aten calls launch nothing (torch.profiler, the CPU; the
    static path runs the functions the graphs capture). A replayed graph pays roughly a small
    kernel each, which is why the unfused step is launch-bound on the GPU."""
    from collections import Counter

    from torch.profiler import ProfilerActivity, profile

    hidden, tokens = inputs(target, model, args.context + 2 * args.accept, seed=0)
    d.observe("ops", hidden[: args.context])
    seen, out = args.context, {}
    for part in ("update", "propose"):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            if part == "update":
                d.observe("ops", hidden[seen : seen + args.accept])
                seen += args.accept
            else:
                d.propose([DraftRequest("ops", tokens[: seen + 1], d.max_depth)])
        names = Counter(
            e.name
            for e in prof.events()
            if e.name.startswith("aten::")
            and e.name not in NO_KERNEL
            and all(c.name in NO_KERNEL or not c.name.startswith("aten::") for c in e.cpu_children)
        )
        out[part] = dict(names.most_common())
    d.release("ops")
    return out


def profile_path(target, model, args) -> dict[str, float]:
    """--profile: one path's --steps steps (after a prefill and a warm-up round, both outside
    the profile) under torch.profiler; prints and returns the per-step split (module docstring)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = target.device.type == "cuda"
    d = drafter(target, model, args.profile, args.window or None, args)
    time_round(d, target, model, args, "warm")
    hidden, tokens = inputs(target, model, args.context + args.steps * args.accept, seed=0)
    d.observe("prof", hidden[: args.context])
    sync(target.device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    seen, k = args.context, args.accept
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for _ in range(args.steps):
            d.observe("prof", hidden[seen : seen + k])
            seen += k
            d.propose([DraftRequest("prof", tokens[: seen + 1], d.max_depth)])
        sync(target.device)
        wall = time.perf_counter() - t0
    d.release("prof")
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    per = {
        "wall_ms": wall / args.steps * 1e3,
        "device_busy_ms": sum(e.time_range.elapsed_us() for e in kernels) / args.steps / 1e3,
        "kernels": len(kernels) / args.steps,
    }
    print(
        f"profile {args.profile}: {per['wall_ms']:.3f} ms a step (update + propose), device busy "
        f"{per['device_busy_ms']:.3f} ms, {per['kernels']:.0f} kernels a step"
    )
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=20, max_name_column_width=60))
    return per


def timing(target, model, args, paths: list[str]) -> dict[str, dict[str, float]]:
    drafters = {p: drafter(target, model, p, args.window or None, args) for p in paths}
    samples: dict[str, dict[str, list[float]]] = {p: {"update": [], "propose": []} for p in paths}
    for rnd in range(args.rounds + 1):  # round 0: warm-up, not counted
        for p in paths if rnd % 2 else paths[::-1]:
            got = time_round(drafters[p], target, model, args, f"r{rnd}")
            if rnd:
                for part, xs in got.items():
                    samples[p][part] += xs
    out = {}
    for p in paths:
        s = samples[p]
        steps = [u + q for u, q in zip(s["update"], s["propose"], strict=True)]
        out[p] = {
            "update_ms": statistics.median(s["update"]) * 1e3,
            "propose_ms": statistics.median(s["propose"]) * 1e3,
            "step_ms": statistics.median(steps) * 1e3,
        }
    for p in paths:
        out[p]["vs_growing"] = out[p]["step_ms"] / out["growing"]["step_ms"]
    return out


def script_drafts(d: DFlashDrafter, target, model, steps: int) -> list[Draft]:
    """Request a: a 40-row prefill and `steps` steps of 1..B rows + propose; then a is
    released and b (reusing a's store) does the same from a 3-row prefill."""
    rng = np.random.default_rng(0)
    drafts = []
    for seed, rid, prefill in ((0, "a", 40), (1, "b", 3)):
        hidden, tokens = inputs(target, model, prefill + steps * d.block_size, seed)
        d.observe(rid, hidden[:prefill])
        seen = prefill
        for _ in range(steps):
            drafts += d.propose([DraftRequest(rid, tokens[: seen + 1], d.max_depth)])
            n = int(rng.integers(1, d.block_size + 1))
            d.observe(rid, hidden[seen : seen + n])
            seen += n
        d.release(rid)
    return drafts


def disagreement(got: list[Draft], want: list[Draft], tol: float) -> str | None:
    """Where two runs of the script disagree beyond `tol`, or None: the sorted top-k log-probs
    (robust to a swap at a tie), and the chain wherever the reference's best beats its second
    by more than `tol` (a near-tie may go either way)."""
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        gap = float(np.abs(g.topk_logprobs - w.topk_logprobs).max())
        if gap > tol:
            return f"step {i}: top-k log-probs differ by {gap:.2e}"
        lp = w.topk_logprobs
        margins = lp[:, 0] - lp[:, 1] if lp.shape[1] > 1 else np.full(len(lp), np.inf)
        for depth, (a, b) in enumerate(zip(g.chain, w.chain, strict=True)):
            if a != b and margins[depth] > tol:
                return f"step {i}: chain differs at depth {depth} ({a} vs {b})"
    return None


def paths_for(args: argparse.Namespace) -> list[str]:
    """The paths a run compares: the eager ones, and on CUDA the captured step uncompiled and
    compiled (the engine's); `--compile` adds the compiled static step on the CPU."""
    if args.device == "cuda":
        return ["growing", "ring", "static", "graph", "graph+compile"]
    return ["growing", "ring", "static"] + (["static+compile"] if args.compile else [])


def check(target, model, args) -> int:
    fp32 = target.dtype == torch.float32
    paths = paths_for(args)
    tol = 1e-3 if fp32 else 5e-2
    pairs = [("ring", "growing"), ("static", "growing"), ("graph", "static")]
    pairs += [("graph+compile", "static"), ("static+compile", "static")]
    bad = 0
    for window in (None, 24):  # 24: the ring wraps, updates land across its end
        runs = {
            p: script_drafts(drafter(target, model, p, window, args), target, model, 40)
            for p in paths
        }
        for a, b in [pair for pair in pairs if pair[0] in runs]:
            why = disagreement(runs[a], runs[b], tol)
            gap = max(
                float(np.abs(g.topk_logprobs - w.topk_logprobs).max())
                for g, w in zip(runs[a], runs[b], strict=True)
            )
            print(
                f"check window={window} {a} vs {b}: {why or 'ok'} (largest gap {gap:.1e}, tol {tol})"
            )
            bad += why is not None
    return 1 if bad else 0


def sdpa_backend(name: str):
    """--sdpa: the attention kernels every path may use (compiled graphs pick theirs when they
    are traced, so the choice holds for the whole run); "auto" leaves torch's own choice.
    Inductor's compiled-graph cache does not key on that choice: a run after an "auto" one
    replayed the cached cuDNN attention under "math" (H100, 2026-12-06; on this CPU the same,
    flash attention instead of bmm), so a chosen backend compiles without the caches."""
    if name == "auto":
        return contextlib.nullcontext()
    import torch._inductor.config
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch._inductor.config.force_disable_caches = True
    backend = {
        "math": SDPBackend.MATH,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
    }[name]
    return sdpa_kernel([backend])


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--random-weights", action="store_true", help="random weights of --shape")
    ap.add_argument("--shape", default="smollm2", choices=sorted(SHAPES))
    ap.add_argument("--dtype", default=None, choices=[None, "float32", "bfloat16"])
    ap.add_argument("--context", type=int, default=512, help="rows observed before timing")
    ap.add_argument("--accept", type=int, default=3, help="rows per context update (k)")
    ap.add_argument("--window", type=int, default=0, help="draft window (0 = none)")
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--steps", type=int, default=50, help="timed steps per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    ap.add_argument("--check", action="store_true", help="compare the paths' drafts, exit 1 if off")
    ap.add_argument(
        "--draft-vocab",
        type=int,
        default=0,
        help="--random-weights: draft over N token ids (a random subset; 0 = every token); "
        "the shipped drafter drafts over its own",
    )
    ap.add_argument(
        "--layers-block",
        default="",
        help="--random-weights: the drafter's layers,block (e.g. 2,16: the GPU preset's)",
    )
    ap.add_argument(
        "--compile", action="store_true", help="CPU: also the static step fused by torch.compile"
    )
    ap.add_argument(
        "--count-ops",
        action="store_true",
        help="only count the static step's kernel-launching ops per part (CPU profiler)",
    )
    ap.add_argument(
        "--profile",
        default=None,
        metavar="PATH",
        help="only profile PATH's steps (e.g. graph+compile): wall vs device-busy time, kernels",
    )
    ap.add_argument(
        "--sdpa",
        default="auto",
        choices=["auto", "math", "cudnn"],
        help="the block's attention kernels (auto: torch's choice, cuDNN on an H100; "
        "memory-efficient attention cannot run it: 9 query heads against 3 key heads)",
    )
    ap.add_argument(
        "--attention",
        default=None,
        choices=DRAFT_ATTENTION,
        help="the block's attention: SDPA's kernels (--sdpa) or grouped matmuls "
        "(dflash_model.grouped_attention); default the engine's on the device "
        "(dflash_block.block_attention: grouped on CUDA, SDPA on a CPU)",
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.draft_vocab and not args.random_weights:
        ap.error("--draft-vocab: with --random-weights (the shipped drafter has its own)")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device")
    return args


def main() -> None:
    args = parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    with sdpa_backend(args.sdpa):
        run(args)


def run(args: argparse.Namespace) -> None:
    target, model = models(args)
    print(
        f"device={args.device} target={target.name} dtype={target.dtype} "
        f"drafter: {len(model.layers)} layer(s), block {model.config.block_size}; "
        f"context={args.context} accept={args.accept} window={args.window or None} "
        f"torch_threads={torch.get_num_threads()} sdpa={args.sdpa} attention={args.attention}"
    )
    if args.check:
        sys.exit(check(target, model, args))
    if args.count_ops:
        static = drafter(target, model, "static", args.window or None, args)
        for part, names in count_ops(static, target, model, args).items():
            top = ", ".join(f"{n.removeprefix('aten::')} {c}" for n, c in list(names.items())[:8])
            print(f"{part}: {sum(names.values())} kernel-launching ops ({top}, ...)")
        return
    if args.profile:
        per = profile_path(target, model, args)
        if args.json:
            Path(args.json).write_text(json.dumps({"args": vars(args), "profile": per}, indent=1))
        return
    result = timing(target, model, args, paths_for(args))
    print(
        f"{'path':14s} {'update ms':>10s} {'propose ms':>11s} {'step ms':>8s} {'vs growing':>11s}"
    )
    for p, r in result.items():
        print(
            f"{p:14s} {r['update_ms']:10.3f} {r['propose_ms']:11.3f} {r['step_ms']:8.3f} "
            f"{r['vs_growing']:10.2f}x"
        )
    new = "graph" if args.device == "cuda" else "ring"
    print(f"ratio new/old ({new} / growing, step): {result[new]['vs_growing']:.2f}")
    fused = "graph+compile" if args.device == "cuda" else "static+compile"
    if fused in result:
        plain = fused.split("+")[0]
        ratio = result[fused]["step_ms"] / result[plain]["step_ms"]
        print(f"ratio compiled / not ({fused} / {plain}, step): {ratio:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": result}, indent=1))


if __name__ == "__main__":
    main()
