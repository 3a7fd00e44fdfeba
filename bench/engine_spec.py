"""Speculative decoding in specscope's engine vs transformers, same weights, device and run.

Configurations (batch 1, greedy, each prompt decoded to --max-new-tokens):
- engine: no speculation; n-gram chain; model chain (early-exit draft = the target's first
  --draft-layers layers, and the target drafting for itself); model tree (DDTree) at budgets
  --budgets; with --dflash REF[,REF..], the DFlash block drafter (chain of --dflash-depth
  drafts, and DDTree at --budgets) conditioned on the target's hidden states, per drafter;
- transformers `generate` on a LlamaForCausalLM holding OUR tensors: plain, prompt lookup
  (`prompt_lookup_num_tokens`), and assisted generation (`assistant_model` = the same
  early-exit model as a separate LlamaForCausalLM sharing the weights).
Prompt sets: code completion, chat (chat template), and edit (chat: "rewrite this code/text", whose
answer copies the prompt: where n-gram lookup should pay off); `cat:CATEGORY` for prompts of a
workload category rendered from seeds 1000+, the seeds train_dflash evaluates on (a category with
little material renders the same prompts from other seeds too: train_dflash's card says how many
of its evaluation prompts training never saw); `file:PATH` for every prompt of a corpus file, e.g.
the held-out sets #39's figures are measured on (`file:bench/data/dflash/heldout_code.jsonl`,
`--file-prompts N` to take the first N).
tok/s = generated tokens / wall time of the generation (prefill included, same for all rows);
mean commit = tokens per verify step (engine rows). Ratios are against the same run's plain
rows (engine plain for engine rows, transformers plain for transformers rows) and engine/HF.
ms/step (engine rows, stderr) splits a step: draft, tree, verify, commit; DFlash rows also
observe (the drafter's context update). On CUDA the update is only staged there (a copy of the
verify's rows) and written in the next step's draft, in the same replay as the block.
`--profile N`: each speculative configuration once more under cProfile and torch.profiler (where
a step's host time goes: the sixth device session found the drafting step's that way).

    .venv/bin/python bench/engine_spec.py                        # CPU, SmolLM2 from the GGUF
    .venv/bin/python bench/engine_spec.py --max-new-tokens 32 --prompts 1 --budgets 4,16
    .venv/bin/python bench/engine_spec.py --dflash smollm2 --configs ngram,dflash --skip-hf \
        --skip-self --sets code,chat,cat:long-writing --threads 1
    python bench/engine_spec.py --device cuda --random-weights   # speed only (acceptance meaningless)
    python3 bench/engine_spec.py --device cuda --dflash smollm2 --configs dflash --budgets 16 \
        --sets file:bench/data/dflash/heldout_code.jsonl --file-prompts 4 --repeats 1 \
        --dflash-depth 15 --skip-hf --skip-self --stop-at-eos --profile 40   # H200
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from specscope.backend import SamplingParams
from specscope.engine.backend import EngineBackend
from specscope.engine.factory import assemble
from specscope.engine.hf_reference import hf_llama_from
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import LoadedModel, load_model, random_model
from specscope.engine.options import DRAFT_ATTENTION, EngineOptions
from specscope.engine.training.corpus import CorpusError, read_corpus
from specscope.engine.training.prompts import EVAL_SEED_OFFSET, category_prompts, encode_corpus

CODE_PROMPTS = [
    "def add(a, b):\n    return a + b\n\n\ndef subtract(a, b):\n    return a - b\n\n\n"
    "def multiply(a, b):\n    return a * b\n\n\ndef divide(a, b):\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
    '    def __repr__(self):\n        return f"Point({self.x}, {self.y})"\n\n'
    "class Point3D:\n    def __init__(self, x, y, z):\n",
    "for i in range(10):\n    print(i)\nfor j in range(20):\n    print(j)\nfor k in range(30):\n",
]
CHAT_PROMPTS = [
    "What are three tips for staying productive when working from home?",
    "Explain in simple words why the sky is blue.",
    "Write a short poem about the sea.",
]

# Edits: the answer copies most of the prompt (the case prompt lookup was made for).
EDIT_PROMPTS = [
    "Add a docstring to each function and return the code:\n```python\n"
    "def area(width, height):\n    return width * height\n\n\n"
    "def perimeter(width, height):\n    return 2 * (width + height)\n\n\n"
    "def is_square(width, height):\n    return width == height\n```",
    "Rename the variable `data` to `items` in this code:\n```python\n"
    "def total(data):\n    result = 0\n    for x in data:\n        result += x\n    return result\n\n\n"
    "def average(data):\n    if not data:\n        return 0\n    return total(data) / len(data)\n```",
    "Fix the typo in this text and repeat it: The quick brown fox jumsp over the lazy dog. "
    "The dog does not move. The fox runs into the forest and the dog keeps sleeping in the sun.",
]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def engine_backend(lm: LoadedModel, rows: int, spec: dict) -> EngineBackend:
    """One backend per configuration (on CUDA: its graphs captured once), reused for every
    prompt: batch 1, page 16 contiguous."""
    page = 16
    kv = KVCache.for_model(
        lm.config, pool_tokens=rows + page, page_size=page, dtype=lm.dtype, device=lm.device
    )
    opts = EngineOptions.from_flags(device=lm.device.type, page_size=page, max_batch=1, **spec)
    return assemble(lm, kv, opts)


def engine_run(
    backend: EngineBackend, prompts: list[list[int]], new_tokens: int, stop_at_eos: bool = False
) -> dict:
    lm = backend.lm
    params = SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=not stop_at_eos)
    tokens = steps = 0
    secs = 0.0
    split: dict[str, float] = {}
    outputs = []
    for i, prompt in enumerate(prompts):
        sync(lm.device)
        t0 = time.perf_counter()
        backend.prefill_sync(f"r{i}", prompt, params)
        out: list[int] = []
        while not backend.requests[f"r{i}"].finished and steps < 100_000:
            step = backend.step_sync([f"r{i}"])
            out.extend(step.outputs[0].tokens)
            steps += 1
            for k, v in step.timing.items():
                split[k] = split.get(k, 0.0) + v
        sync(lm.device)
        secs += time.perf_counter() - t0
        backend.release(f"r{i}")
        tokens += len(out)
        outputs.append(out)
    return {
        "tok_s": tokens / secs,
        "commit": tokens / max(steps, 1),
        "tokens": tokens,
        "secs": secs,
        "steps": steps,
        "split": {k: round(v / max(steps, 1) * 1e3, 2) for k, v in split.items()},
        "outputs": outputs,
    }


def pool(a: dict, b: dict) -> dict:
    """Two rounds of the same configuration as one (total tokens / total time)."""
    tokens, secs, steps = a["tokens"] + b["tokens"], a["secs"] + b["secs"], a["steps"] + b["steps"]
    split = {
        k: round((a["split"].get(k, 0) * a["steps"] + b["split"].get(k, 0) * b["steps"]) / steps, 2)
        for k in set(a["split"]) | set(b["split"])
    }
    return {
        "tok_s": tokens / secs,
        "commit": tokens / max(steps, 1),
        "tokens": tokens,
        "secs": secs,
        "steps": steps,
        "split": split,
        "outputs": a["outputs"],
    }


def hf_models(lm: LoadedModel, draft_layers: int):
    return hf_llama_from(lm), hf_llama_from(lm, num_layers=draft_layers)


def hf_run(
    hf,
    prompts: list[list[int]],
    new_tokens: int,
    device: torch.device,
    stop_at_eos: bool = False,
    **kw,
) -> dict:
    tokens, secs = 0, 0.0
    outputs = []
    for prompt in prompts:
        ids = torch.tensor([prompt], device=device)
        sync(device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = hf.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new_tokens,
                min_new_tokens=None if stop_at_eos else new_tokens,
                do_sample=False,
                pad_token_id=0,
                **kw,
            )
        sync(device)
        secs += time.perf_counter() - t0
        gen = out[0, len(prompt) :].tolist()
        tokens += len(gen)
        outputs.append(gen)
    return {"tok_s": tokens / secs, "tokens": tokens, "outputs": outputs}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument(
        "--random-weights",
        action="store_true",
        help="same architecture, random weights (speed only)",
    )
    ap.add_argument("--dtype", default=None, choices=[None, "float32", "bfloat16"])
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument(
        "--stop-at-eos",
        action="store_true",
        help="end each answer at the model's end-of-turn token (default: always --max-new-tokens, "
        "past the answer's end, where a chat model starts an unrelated turn)",
    )
    ap.add_argument("--prompts", type=int, default=2, help="prompts per set (<= 3)")
    ap.add_argument("--num-draft-tokens", type=int, default=4)
    ap.add_argument("--tree-depth", type=int, default=6)
    ap.add_argument("--budgets", default="4,16,64")
    ap.add_argument("--draft-layers", type=int, default=8)
    ap.add_argument(
        "--ngram-min", type=int, default=3, help="shortest n-gram the lookup drafter matches"
    )
    ap.add_argument(
        "--configs",
        default="",
        help="only run configurations whose name contains one of these (comma list)",
    )
    ap.add_argument(
        "--sets",
        default="code,chat,edit",
        help="comma list: code, chat, edit, cat:CATEGORY, file:CORPUS.jsonl",
    )
    ap.add_argument(
        "--file-prompts", type=int, default=0, help="prompts per file: set (0 = every one)"
    )
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument(
        "--hf-prompts", type=int, default=0, help="prompts per set for transformers (0 = all)"
    )
    ap.add_argument(
        "--skip-self", action="store_true", help="skip the self-drafting row (slow by design)"
    )
    ap.add_argument("--repeats", type=int, default=2, help="rounds over the engine configurations")
    ap.add_argument(
        "--threads", type=int, default=0, help="torch intra-op threads (0 = torch default)"
    )
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument(
        "--dflash",
        default=None,
        help="DFlash drafters (folders or shipped names, comma list; rows named by each when "
        "several, e.g. one with a draft vocabulary and one without) to add",
    )
    ap.add_argument(
        "--eager",
        action="store_true",
        help="CUDA: every engine configuration on the eager path (the DFlash drafter's step too)",
    )
    ap.add_argument(
        "--no-torch-compile",
        action="store_true",
        help="CUDA: graphs of unfused steps (the target's token-wise parts and the DFlash "
        "drafter's step are torch.compile'd by default)",
    )
    ap.add_argument(
        "--dflash-depth", type=int, default=7, help="DFlash chain drafts (<= block size - 1)"
    )
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="after the tables: each speculative configuration once more under cProfile and "
        "torch.profiler, their N costliest entries a step (profile_configs)",
    )
    ap.add_argument(
        "--profile-prompts", type=int, default=2, help="--profile: prompts of the first set"
    )
    ap.add_argument(
        "--dflash-attention",
        default=None,
        help=f"DFlash block attentions to time (comma list of {', '.join(DRAFT_ATTENTION)}; "
        "rows named by each when several; default the engine's)",
    )
    args = ap.parse_args()
    unknown = set((args.dflash_attention or "").split(",")) - {"", *DRAFT_ATTENTION}
    if unknown:
        ap.error(f"--dflash-attention: {sorted(unknown)} not among {DRAFT_ATTENTION}")
    wants_text = [s for s in args.sets.split(",") if s.startswith(("cat:", "file:"))]
    if args.random_weights and wants_text:
        ap.error(f"{wants_text[0]}: category and corpus prompts need real weights (a tokenizer)")
    return args


def load_models(args: argparse.Namespace) -> tuple[LoadedModel, LoadedModel | None]:
    """The model timed, and the one whose tokenizer renders the prompts (None with random
    weights: the prompts are then pseudo-random ids of the texts' lengths)."""
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(args.dtype or "")
    if args.random_weights:
        return random_model(device=args.device, dtype=dtype), None
    lm = load_model(args.model, device=args.device, dtype=dtype)
    return lm, lm


def prompt_sets(
    args: argparse.Namespace, lm: LoadedModel, text_lm: LoadedModel | None
) -> dict[str, list[list[int]]]:
    """Every set --sets may name, as token ids: the built-in texts, cat: and file: sets."""

    def encode(text: str, chat: bool) -> list[int]:
        if text_lm is None:  # random weights: deterministic pseudo-prompts of similar length
            g = torch.Generator().manual_seed(len(text))
            base = torch.randint(0, lm.config.vocab_size, (24,), generator=g).tolist()
            return (base * 4)[: max(16, len(text) // 4)]
        if chat:
            return text_lm.codec.chat_ids([{"role": "user", "content": text}])
        return text_lm.codec.encode(text)

    sets = {
        "code": [encode(p, False) for p in CODE_PROMPTS[: args.prompts]],
        "chat": [encode(p, True) for p in CHAT_PROMPTS[: args.prompts]],
        "edit": [encode(p, True) for p in EDIT_PROMPTS[: args.prompts]],
    }
    for name in [s for s in args.sets.split(",") if s.startswith("cat:")]:
        category = name.removeprefix("cat:")
        rendered = category_prompts(text_lm, [category], args.prompts, EVAL_SEED_OFFSET, 700)
        sets[name] = [p for _, p in rendered]
    for name in [s for s in args.sets.split(",") if s.startswith("file:")]:
        try:
            records = read_corpus(Path(name.removeprefix("file:")))
        except CorpusError as exc:
            sys.exit(f"engine_spec: {exc}")
        sets[name] = [p for _, p in encode_corpus(text_lm, records[: args.file_prompts or None])]
    return sets


def configurations(args: argparse.Namespace) -> list[tuple[str, dict]]:
    """The engine rows, by name: plain, n-gram, early-exit and self drafting, DFlash per drafter;
    filtered by --configs (the plain row always runs: it is every ratio's anchor)."""
    k, depth = args.num_draft_tokens, args.tree_depth
    budgets = [int(x) for x in args.budgets.split(",") if x]
    draft = f"layers:{args.draft_layers}"
    ng = {"drafter": "ngram", "ngram_min": args.ngram_min}
    configs: list[tuple[str, dict]] = [
        ("engine plain", {}),
        (f"engine ngram chain k={k}", {**ng, "verify": "chain", "num_draft_tokens": k}),
        (f"engine ngram chain k={2 * k}", {**ng, "verify": "chain", "num_draft_tokens": 2 * k}),
        (
            f"engine ngram tree k={k} B={4 * k}",
            {**ng, "verify": "tree", "num_draft_tokens": k, "budget": 4 * k},
        ),
        (
            f"engine model({draft}) chain k={k}",
            {"drafter": draft, "verify": "chain", "num_draft_tokens": k},
        ),
    ]
    if not args.skip_self and not args.random_weights:  # model:PATH would load real weights
        self_spec = {"drafter": "model:" + args.model, "verify": "chain", "num_draft_tokens": k}
        configs.append((f"engine model(self) chain k={k}", self_spec))
    for b in budgets:
        tree = {"drafter": draft, "verify": "tree", "num_draft_tokens": depth, "budget": b}
        configs.append((f"engine model({draft}) tree d={depth} B={b}", tree))
    refs = [r for r in (args.dflash or "").split(",") if r]
    attentions = [a for a in (args.dflash_attention or "").split(",") if a] or [None]
    for ref, attention in itertools.product(refs, attentions):
        named = [ref] * (len(refs) > 1) + [attention] * (len(attentions) > 1)
        label = f"dflash[{','.join(named)}]" if named else "dflash"
        chain = {"drafter": f"dflash:{ref}", "verify": "chain", "draft_attention": attention}
        d = args.dflash_depth
        configs.append((f"engine {label} chain k={d}", {**chain, "num_draft_tokens": d}))
        for b in budgets:
            tree = {**chain, "verify": "tree", "num_draft_tokens": d, "budget": b}
            configs.append((f"engine {label} tree d={d} B={b}", tree))
    if args.configs:
        wanted = [w for w in args.configs.split(",") if w]
        configs = [c for c in configs if c[0] == "engine plain" or any(w in c[0] for w in wanted)]
    return configs


def engine_rows(
    args: argparse.Namespace,
    backends: dict[str, EngineBackend],
    configs: list[tuple[str, dict]],
    prompts: list[list[int]],
) -> dict[str, dict]:
    """Every engine configuration on one set, pooled over --repeats rounds in alternating order
    (forward, reverse, ...) so that a load drift on a shared machine does not favour whichever
    configuration ran first."""
    rows: dict[str, dict] = {}
    for rnd in range(args.repeats):
        for name, _ in configs if rnd % 2 == 0 else configs[::-1]:
            r = engine_run(backends[name], prompts, args.max_new_tokens, args.stop_at_eos)
            rows[name] = pool(rows[name], r) if name in rows else r
    return rows


def hf_rows(args: argparse.Namespace, lm: LoadedModel, hf_pair, prompts: list[list[int]]) -> dict:
    """transformers' plain, prompt-lookup and assisted generation on our tensors."""
    hf, hf_draft = hf_pair
    hf_prompts = prompts[: args.hf_prompts or None]
    k, new, eos = args.num_draft_tokens, args.max_new_tokens, args.stop_at_eos
    return {
        "hf plain": hf_run(hf, hf_prompts, new, lm.device, eos),
        f"hf prompt lookup k={k}": hf_run(
            hf, hf_prompts, new, lm.device, eos, prompt_lookup_num_tokens=k
        ),
        f"hf assisted (layers:{args.draft_layers})": hf_run(
            hf, hf_prompts, new, lm.device, eos, assistant_model=hf_draft
        ),
    }


def profile_configs(
    args: argparse.Namespace,
    backends: dict[str, EngineBackend],
    configs: list[tuple[str, dict]],
    prompts: list[list[int]],
) -> None:
    """--profile N: each speculative configuration over the first prompts once more under
    cProfile (the N costliest Python functions, own time a step) and once under torch.profiler
    (the N costliest ops by own host time a step, and the device's busy time a step against
    the step's wall): where a served step's time goes that its split (draft, observe, ...)
    does not say. Both profilers slow the host, so read the split of each, not its total."""
    import cProfile
    import pstats

    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    for name, _ in configs:
        if name == "engine plain":
            continue
        backend = backends[name]
        prof = cProfile.Profile()
        prof.enable()
        steps = engine_run(backend, prompts, args.max_new_tokens, args.stop_at_eos)["steps"]
        prof.disable()
        print(f"\n--profile {name}: {steps} steps; Python, own time a step (us)")
        stats = sorted(pstats.Stats(prof).stats.items(), key=lambda kv: -kv[1][2])
        for (file, line, func), (_, calls, own, total, _) in stats[: args.profile]:
            print(
                f"  {own / steps * 1e6:8.1f} own {total / steps * 1e6:8.1f} total "
                f"{calls / steps:6.1f} calls  {Path(file).name}:{line} {func}"
            )
        with profile(activities=acts) as tprof:
            t0 = time.perf_counter()
            steps = engine_run(backend, prompts, args.max_new_tokens, args.stop_at_eos)["steps"]
            wall = time.perf_counter() - t0
        busy = sum(
            e.time_range.elapsed_us() for e in tprof.events() if e.device_type == DeviceType.CUDA
        )
        print(
            f"--profile {name}: torch.profiler, {wall / steps * 1e3:.3f} ms a step, device busy "
            f"{busy / steps / 1e3:.3f} ms a step; ops by own host time:"
        )
        table = tprof.key_averages().table(
            sort_by="self_cpu_time_total", row_limit=args.profile, max_name_column_width=50
        )
        print(table)


def print_tables(results: dict[str, dict[str, dict]]) -> None:
    """One table per set: tok/s, commit, ratios to the same run's plain rows, lossless check."""
    for set_name, rows in results.items():
        base_e = rows["engine plain"]["tok_s"]
        base_h = rows.get("hf plain", {}).get("tok_s")
        ref = rows["engine plain"]["outputs"]
        print(
            f"\n[{set_name}] {'configuration':42s} {'tok/s':>8s} {'commit':>7s} {'vs plain':>9s} "
            f"{'vs hf plain':>11s} same-as-plain"
        )
        for name, r in rows.items():
            base = base_h if name.startswith("hf") else base_e
            vs_hf = f"{r['tok_s'] / base_h:10.2f}x" if base_h else "         -"
            commit = f"{r['commit']:7.2f}" if "commit" in r else "      -"
            same = "yes" if r["outputs"] == ref[: len(r["outputs"])] else "no"
            print(
                f"[{set_name}] {name:42s} {r['tok_s']:8.1f} {commit} {r['tok_s'] / base:8.2f}x "
                f"{vs_hf} {same}"
            )


def main() -> None:
    args = parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    lm, text_lm = load_models(args)
    torch.manual_seed(0)
    sets = prompt_sets(args, lm, text_lm)
    configs = configurations(args)
    print(
        f"device={args.device} model={lm.name} dtype={lm.dtype} "
        f"weights={'random' if args.random_weights else 'real'} new_tokens={args.max_new_tokens} "
        f"prompts/set={args.prompts} torch_threads={torch.get_num_threads()}",
        file=sys.stderr,
    )
    rows = max(len(p) for ps in sets.values() for p in ps) + args.max_new_tokens + 80
    eager = {"cuda_graphs": False} if args.eager else {}
    eager |= {"torch_compile": False} if args.no_torch_compile else {}
    backends = {name: engine_backend(lm, rows, {**spec, **eager}) for name, spec in configs}
    engine_run(backends["engine plain"], sets["code"][:1], 4)  # warm-up: first-call allocations
    hf_pair = None if args.skip_hf else hf_models(lm, args.draft_layers)
    results: dict[str, dict[str, dict]] = {}
    for set_name in [s for s in args.sets.split(",") if s]:
        results[set_name] = engine_rows(args, backends, configs, sets[set_name])
        for name, r in results[set_name].items():
            print(
                f"  {set_name:4s} {name:40s} {r['tok_s']:7.1f} tok/s commit {r['commit']:.2f} "
                f"ms/step {r['split']}",
                file=sys.stderr,
            )
        if hf_pair is not None:
            results[set_name].update(hf_rows(args, lm, hf_pair, sets[set_name]))
    print_tables(results)
    if args.profile:
        first = next(s for s in args.sets.split(",") if s)
        profile_configs(args, backends, configs, sets[first][: args.profile_prompts])
    if args.json:
        for rows_of_set in results.values():
            for r in rows_of_set.values():
                r.pop("outputs", None)
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))


if __name__ == "__main__":
    main()
