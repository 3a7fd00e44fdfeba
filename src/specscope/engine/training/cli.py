"""The trainer's command line: flags, the cpu/gpu presets they default to, and main().

`python -m specscope.engine.train_dflash` runs `main` (engine/train_dflash.py is only that entry
point). Every preset value is also a flag, so one setting can be changed without leaving the
preset; the help text is the package docstring (the recipe).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import specscope.engine.training as package
from specscope.engine.speculative import dflash_model
from specscope.engine.training.batch import BLOCKS_PER_ROW
from specscope.engine.training.checkpoint import Stopped, export_drafter
from specscope.engine.training.loop import ATTENTION
from specscope.engine.training.pipeline import eval_set_names, run

EXIT_STOPPED = 3  # stopped on time with its progress saved: run again with --resume
MAX_RESPONSE_TEMPERATURE = 2.0  # as `diagnose --temperature`: past it a small model's text is noise

PRESETS = {
    # One CPU thread in ~25 minutes: a one-layer drafter, short blocks, short responses.
    "cpu": {
        "draft_layers": 1,
        "block_size": 8,
        "gamma": 4.0,
        "prompts_per_category": 8,
        "response_tokens": 96,
        "prompt_chars": 700,
        "anchors": 24,
        "seqs_per_step": 1,
        "minutes": 16.0,
        "eval_prompts": 1,
        "eval_tokens": 48,
        "lr": 1e-3,
    },
    # The H200 session: the recipe's block 16 / gamma 7, more data and longer responses.
    "gpu": {
        "draft_layers": 2,
        "block_size": 16,
        "gamma": 7.0,
        "prompts_per_category": 96,
        "response_tokens": 384,
        "prompt_chars": 1600,
        "anchors": 256,
        "seqs_per_step": 8,
        "minutes": 15.0,
        "eval_prompts": 4,
        "eval_tokens": 256,
        "lr": 6e-4,
    },
}


def _add_run_flags(ap: argparse.ArgumentParser) -> None:
    """Where features come from, the step's layout, and how one call runs: stop on time,
    checkpoint, resume."""
    ap.add_argument(
        "--feature-cache",
        default="auto",
        choices=["auto", "on", "off"],
        help="keep the target's tapped features (on), or compute them every step (off); "
        "auto: on for a CPU data set that fits in memory",
    )
    ap.add_argument(
        "--blocks-per-row",
        type=int,
        default=BLOCKS_PER_ROW,
        help="a training step's blocks per attention row: speed only "
        "(bench/dflash_train_throughput.py measures it)",
    )
    ap.add_argument(
        "--attention",
        default="auto",
        choices=sorted(ATTENTION),
        help="CUDA: the attention kernels a training step may use; no-cudnn keeps cuDNN's "
        "out (it builds a plan per shape, and a step's shapes change): speed only",
    )
    ap.add_argument(
        "--stop-after-minutes",
        type=float,
        default=None,
        help="stop at the first shard or step after M minutes of this call, with a checkpoint "
        f"(exit {EXIT_STOPPED}); continue with --resume",
    )
    ap.add_argument(
        "--checkpoint-minutes",
        type=float,
        default=5.0,
        help="minutes between checkpoints in OUT/checkpoint (0: only at a stop and at the end)",
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help="continue the run whose checkpoint is in OUT/checkpoint (same flags; none there "
        "yet: start it), so one command line repeated until it exits 0 runs a whole run",
    )
    ap.add_argument(
        "--export-checkpoint",
        action="store_true",
        help="only write OUT's drafter (config.json, model.safetensors in --save-dtype) from "
        "OUT/checkpoint, e.g. parts brought back from the GPU machine",
    )


def _add_data_flags(ap: argparse.ArgumentParser) -> None:
    """Where the prompts come from: a corpus file and the held-out sets (engine/training/corpus.py)."""
    ap.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="train on this corpus file's train split (corpus_build) instead of --categories",
    )
    ap.add_argument(
        "--max-prompts", type=int, default=0, help="--corpus: the first N training prompts (0: all)"
    )
    ap.add_argument(
        "--eval-set",
        default=None,
        help="comma list of corpus files evaluated as held-out sets (each named by its file "
        "stem), e.g. bench/data/dflash/heldout_code.jsonl; replaces the categories' seeds 1000+",
    )
    ap.add_argument(
        "--eval-set-prompts", type=int, default=0, help="--eval-set: first N of each (0: all)"
    )
    ap.add_argument(
        "--response-temperature",
        type=float,
        default=0.0,
        help="the target's responses sampled at this temperature (each prompt seeded from its "
        "own tokens) instead of greedy: a drafter for sampled requests; 0: greedy",
    )


def _add_vocab_flags(ap: argparse.ArgumentParser) -> None:
    """The draft vocabulary (engine/speculative/draft_vocab.py): trained with, or given after."""
    ap.add_argument(
        "--draft-vocab",
        type=int,
        default=0,
        help="draft over the N most frequent tokens of the training responses only (a cheaper "
        "LM head; a token outside them is never drafted); 0: the target's whole vocabulary",
    )
    ap.add_argument(
        "--draft-vocab-only",
        action="store_true",
        help="restrict the drafter already in --out to the --draft-vocab most frequent tokens "
        "of the training prompts (--corpus's, or the categories'), without training, and "
        "update its card",
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m specscope.engine.train_dflash",
        description=package.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--target", default="smollm2", help="as --model: smollm2, a .gguf or a HF folder"
    )
    ap.add_argument("--out", required=True, type=Path, help="folder for the drafter and its card")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument(
        "--dtype",
        default=None,
        choices=["float32", "bfloat16"],
        help="the target's dtype (default: the device's; fp32 makes the lossless check exact)",
    )
    ap.add_argument("--preset", default="cpu", choices=sorted(PRESETS))
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--steps", type=int, default=None, help="exact step count (overrides --minutes)"
    )
    ap.add_argument(
        "--categories", default=None, help="comma list (default: every built-in category)"
    )
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/dflash"))
    ap.add_argument("--save-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--eval-budget", type=int, default=32, help="DDTree node budget for evaluation")
    ap.add_argument("--gen-batch", type=int, default=8)
    ap.add_argument(
        "--eager", action="store_true", help="CUDA: generate and evaluate without CUDA graphs"
    )
    ap.add_argument(
        "--evaluate-only",
        action="store_true",
        help="evaluate the drafter already in --out (held-out prompts) and update its card",
    )
    ap.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="start from this trained drafter (config.json, model.safetensors: e.g. an earlier "
        "device session's, brought back in parts) instead of a seeded one, with a fresh "
        "schedule over --minutes; its layers, block size and draft vocabulary are kept",
    )
    _add_data_flags(ap)
    _add_vocab_flags(ap)
    _add_run_flags(ap)
    for name, value in PRESETS["cpu"].items():
        ap.add_argument(
            "--" + name.replace("_", "-"),
            type=type(value),
            default=None,
            help=f"preset cpu: {value}, gpu: {PRESETS['gpu'][name]}",
        )
    args = ap.parse_args(argv)
    if args.draft_vocab < 0:
        ap.error("--draft-vocab must be >= 0")
    if not 0.0 <= args.response_temperature <= MAX_RESPONSE_TEMPERATURE:
        ap.error(f"--response-temperature must be within 0..{MAX_RESPONSE_TEMPERATURE}")
    if args.init_from is not None:
        _shape_from_drafter(args, ap)
    for name, value in PRESETS[args.preset].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def _shape_from_drafter(args: argparse.Namespace, ap: argparse.ArgumentParser) -> None:
    """`--init-from`: the drafter's layers and block size where the flags leave them open (a
    preset would otherwise pick a drafter of another shape); one it cannot be is refused."""
    try:
        cfg = dflash_model.read_config(args.init_from)
    except (OSError, ValueError) as exc:
        ap.error(f"--init-from {args.init_from}: no drafter config ({exc})")
    for flag, key in (("draft_layers", "num_layers"), ("block_size", "block_size")):
        asked, has = getattr(args, flag), getattr(cfg, key)
        if asked is not None and asked != has:
            ap.error(f"--{flag.replace('_', '-')} {asked}: --init-from {args.init_from} has {has}")
        setattr(args, flag, has)
    size = cfg.draft_vocab_size
    if args.draft_vocab not in (0, size):
        ap.error(
            f"--draft-vocab {args.draft_vocab}: --init-from {args.init_from} drafts over {size}"
        )


def _check_files(args: argparse.Namespace) -> None:
    """The corpus and held-out files exist, before minutes go into loading the target."""
    names = [str(args.corpus)] if args.corpus is not None else []
    names += eval_set_names(args)
    for name in names:
        if not Path(name).is_file():
            raise FileNotFoundError(f"{name}: no such corpus file")


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        if args.export_checkpoint:
            dtype = torch.bfloat16 if args.save_dtype == "bfloat16" else torch.float32
            print(f"wrote {export_drafter(args.out / 'checkpoint', args.out, dtype)}")
            return 0
        _check_files(args)
        run(args)
    except Stopped as stop:
        print(f"train_dflash: stopped ({stop}); continue with --resume", file=sys.stderr)
        return EXIT_STOPPED
    except (ValueError, FileNotFoundError) as exc:
        print(f"train_dflash: {exc}", file=sys.stderr)
        return 2
    return 0
