"""What a perfect drafter could commit on sampled text: the ceiling the target's own entropy sets.

The decay study (issue #39 item 5, docs/dflash.md) served three DFlash drafters at temperature
1.0 on 1,500-token long-writing generations; all three committed ~1.37 tokens a step, a
10,767-step drafter no more than two trained for 4 minutes. Speculative sampling emits the
target's own samples whatever the drafter proposes (target-only sampling in the tree verify:
engine/speculative/verify.py), so a drafted token is kept only where the sample happens to be
one of the drafted children. On text sampled at T = 1 that is bounded by the target itself.

This reads the generations a `specscope diagnose` run recorded (requests.jsonl: prompt and
text; the long requests: `--min-tokens`), re-tokenizes them, scores every response position
with the target (teacher forcing, fp32, on this CPU) and replays the steps an oracle drafter
would take over the same sampled tokens: the next step starts after the run of positions
whose sampled token is among the target's top-k there (capped at the tree depth), plus the
bonus token. k = 1 is exact for a drafter proposing the target's own greedy chain (the
sample is kept where it equals the argmax); k > 1 bounds any tree with at most k children a
node (it assumes the tree branched into the sampled path at every depth). Also printed: the
mean probability of the argmax and of the top-k mass at T.

    PYTHONPATH=src .venv/bin/python bench/sampled_ceiling.py [RUN_DIR...] [--json OUT]

Without RUN_DIR: the fifth device session's three runs (bench/results/dflash_decay_h100_5.tar.xz).

Re-tokenizing the returned text may split a few tokens differently from the server's stream;
the figures are over the re-tokenized sequence (its length is printed beside the server's).
Beside them, what the server committed on the same requests (the client's step reconstruction
of their streams, analysis/steps), by the same spans of output.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
from pathlib import Path

import torch

from specscope.analysis.steps.reconstruct import reconstruct_steps
from specscope.engine.loader import LoadedModel, load_model
from specscope.trace import RequestTrace, load_run

TOPK = (1, 2, 4, 16)
RESULTS = Path(__file__).parent / "results" / "dflash_decay_h100_5.tar.xz"


def long_requests(run_dir: Path, min_tokens: int) -> list[RequestTrace]:
    """The run's requests that generated at least `min_tokens` without an error."""
    return [
        t
        for t in load_run(run_dir).requests
        if t.error is None and (t.completion_tokens or 0) >= min_tokens
    ]


@torch.no_grad()
def realized_ranks(target, codec, prompt: str, text: str, temperature: float) -> dict:
    """Per response position: the sampled token's rank under the target at `temperature`, the
    argmax's probability and the top-k masses (one teacher-forced forward of `target`, a
    transformers model)."""
    p_ids, r_ids = codec.encode(prompt), codec.encode(text)
    ids = torch.tensor([p_ids + r_ids])
    logits = target(ids).logits[0, len(p_ids) - 1 : -1].float() / temperature
    probs = torch.softmax(logits, -1)
    top = probs.topk(max(TOPK), -1)
    realized = torch.tensor(r_ids)
    rank = (probs > probs.gather(1, realized[:, None])).sum(-1)  # 0: the argmax
    return {
        "tokens": len(r_ids),
        "rank": rank.tolist(),
        "p_max": top.values[:, 0].mean().item(),
        "mass": {k: top.values[:, :k].sum(-1).mean().item() for k in TOPK},
    }


def oracle_steps(rank: list[int], k: int, depth: int) -> list[tuple[int, int]]:
    """(output position, tokens committed) of each step of a drafter whose tree holds the
    target's top-k at every depth along the sampled path: a step keeps the run of in-top-k
    samples (<= depth), plus the bonus."""
    pos, steps = 0, []
    while pos < len(rank):
        run = 0
        while run < depth and pos + run < len(rank) and rank[pos + run] < k:
            run += 1
        steps.append((pos, min(run + 1, len(rank) - pos)))
        pos += run + 1
    return steps


def by_position(steps: list[tuple[int, int]], width: int) -> list[float]:
    """Mean tokens a step over the steps starting in each `width`-token span of the output."""
    spans: dict[int, list[int]] = {}
    for pos, n in steps:
        spans.setdefault(pos // width, []).append(n)
    return [round(sum(v) / len(v), 3) for _, v in sorted(spans.items())]


def summarize(lm: LoadedModel, target, run_dir: Path, min_tokens: int, depth: int) -> dict:
    """One run's figures; `target`: the model in transformers (teacher forcing)."""
    traces = long_requests(run_dir, min_tokens)
    if not traces:
        raise SystemExit(f"{run_dir}: no request of >= {min_tokens} tokens")
    per = []
    for t in traces:
        # greedy text: the ranks are the same at any temperature; the masses are read at 1
        temperature = t.spec.temperature or 1.0
        r = realized_ranks(target, lm.codec, str(t.spec.prompt), t.text or "", temperature)
        r["server_tokens"] = t.completion_tokens
        r["temperature"] = temperature
        per.append(r)
    ranks = [x for r in per for x in r["rank"]]
    n = len(per)
    steps = {k: [st for r in per for st in oracle_steps(r["rank"], k, depth)] for k in TOPK}
    # what the server committed, from the project's step reconstruction of each stream
    served = [(s.output_pos, s.commit_len) for t in traces for s in reconstruct_steps(t).steps]
    return {
        "run_dir": str(run_dir),
        "requests": n,
        "tokens": sum(r["tokens"] for r in per),
        "server_tokens": sum(r["server_tokens"] for r in per),
        "temperature": sorted({r["temperature"] for r in per}),
        "p_argmax": sum(r["p_max"] for r in per) / n,
        "top_k_mass": {k: sum(r["mass"][k] for r in per) / n for k in TOPK},
        "sampled_in_top_k": {k: sum(x < k for x in ranks) / len(ranks) for k in TOPK},
        "oracle_commit": {k: sum(c for _, c in steps[k]) / len(steps[k]) for k in TOPK},
        "oracle_chain_by_256_tokens": by_position(steps[1], 256),
        "served_commit": sum(n for _, n in served) / len(served),
        "served_by_256_tokens": by_position(served, 256),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dirs", nargs="*", type=Path, help=f"default: the runs in {RESULTS.name}")
    ap.add_argument("--min-tokens", type=int, default=1000, help="requests at least this long")
    ap.add_argument("--depth", type=int, default=15, help="the tree's depth (serve: 15 on CUDA)")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        run_dirs = args.run_dirs or shipped_runs(Path(tmp))
        report(args, run_dirs)


def shipped_runs(into: Path) -> list[Path]:
    """The decay study's runs (short, long, shipped drafter), unpacked under `into`."""
    with tarfile.open(RESULTS) as tar:
        tar.extractall(into, filter="data")
    return sorted(into.glob("decay_*/run"))


def report(args: argparse.Namespace, run_dirs: list[Path]) -> None:
    for d in run_dirs:
        if not (d / "requests.jsonl").is_file():
            sys.exit(f"{d}: no requests.jsonl (a `specscope diagnose --out` run directory?)")
    from specscope.engine.hf_reference import hf_llama_from

    lm = load_model(args.model, device="cpu", dtype=torch.float32)
    target = hf_llama_from(lm)
    out = [summarize(lm, target, d, args.min_tokens, args.depth) for d in run_dirs]
    for s in out:
        print(
            f"{s['run_dir']}: {s['requests']} requests, {s['tokens']} tokens re-tokenized "
            f"({s['server_tokens']} streamed), T {s['temperature']}"
        )
        print(f"  target's argmax probability, mean      {s['p_argmax']:.3f}")
        for k in TOPK:
            print(
                f"  top-{k:<2} mass {s['top_k_mass'][k]:.3f}; sampled token in top-{k:<2} "
                f"{s['sampled_in_top_k'][k]:.3f}; oracle commit {s['oracle_commit'][k]:.2f}"
            )
        print(f"  oracle chain by 256 output tokens      {s['oracle_chain_by_256_tokens']}")
        print(
            f"  served, the same requests              {s['served_commit']:.2f} a step; by 256 "
            f"output tokens {s['served_by_256_tokens']}"
        )
        ratio = [
            round(a / b, 2)
            for a, b in zip(
                s["served_by_256_tokens"], s["oracle_chain_by_256_tokens"], strict=False
            )
        ]
        print(
            f"  served / oracle chain                  {s['served_commit'] / s['oracle_commit'][1]:.2f}"
            f"; by 256 output tokens {ratio}"
        )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
