"""The whole run, step by step: prompts -> dataset -> drafter -> training -> save -> evaluation
-> card; and `--evaluate-only`, which re-measures a drafter an earlier run saved.

Each stage lives in its own module; this one only orders them and carries their results into
the card. It takes parsed arguments (cli.py) and, for tests, an already-built target and token
prompts in place of the text ones.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specscope.engine.loader import LoadedModel, load_model
from specscope.engine.speculative import dflash_model
from specscope.engine.speculative.dflash_model import DFlashConfig, DFlashDraftModel
from specscope.engine.training import vocab
from specscope.engine.training.card import write_card
from specscope.engine.training.checkpoint import RunControl
from specscope.engine.training.corpus import read_corpus
from specscope.engine.training.dataset import Sample, build_dataset
from specscope.engine.training.evaluate import evaluate
from specscope.engine.training.loop import TrainSettings, train
from specscope.engine.training.loss import expected_commit
from specscope.engine.training.prompts import (
    ALL_CATEGORIES,
    EVAL_SEED_OFFSET,
    Prompt,
    category_texts,
    distinct_split,
    encode_corpus,
    encode_prompts,
)


def _configure_torch(args: argparse.Namespace) -> None:
    """`--threads`, and on `--device cuda` a device check and TF32 matmuls."""
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device")
    if args.device == "cuda":
        torch.set_float32_matmul_precision(
            "high"
        )  # the fp32 drafter's matmuls on tensor cores (TF32)


def _load_target(args: argparse.Namespace) -> LoadedModel:
    """`--target` on `--device`, in `--dtype` (default: the device's)."""
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(args.dtype or "")
    return load_model(args.target, device=args.device, dtype=dtype)


def _text_prompts(args: argparse.Namespace, target: LoadedModel) -> tuple[list, list]:
    """Training and held-out prompts, encoded for the target. With `--corpus`: its train split,
    held out its heldout-* records (named by split) or the `--eval-set` files. Without: the
    workload `--categories` (seeds 0..P-1), held out their seeds 1000+ (texts that avoid every
    training text) or the `--eval-set` files."""
    if args.corpus is not None:
        records = read_corpus(args.corpus)
        train_records = [r for r in records if r.split == "train"][: args.max_prompts or None]
        held = [r for r in records if r.split != "train"][: args.eval_set_prompts or None]
        train = encode_corpus(target, train_records)
        held_out = [
            (r.split, p) for r, (_, p) in zip(held, encode_corpus(target, held), strict=True)
        ]
        return train, _eval_set_prompts(args, target) if args.eval_set else held_out
    categories = args.categories.split(",") if args.categories else list(ALL_CATEGORIES)
    train_texts = category_texts(categories, args.prompts_per_category, 0, args.prompt_chars)
    if args.eval_set:
        return encode_prompts(target, train_texts), _eval_set_prompts(args, target)
    eval_texts = category_texts(
        categories,
        args.eval_prompts,
        EVAL_SEED_OFFSET,
        args.prompt_chars,
        avoid=frozenset(t for _, t in train_texts),
    )
    return encode_prompts(target, train_texts), encode_prompts(target, eval_texts)


def eval_set_names(args: argparse.Namespace) -> list[str]:
    """The `--eval-set` files, as given (a comma list; none: [])."""
    return [n for n in (args.eval_set or "").split(",") if n]


def _eval_set_prompts(args: argparse.Namespace, target: LoadedModel) -> list[Prompt]:
    """Every record of each `--eval-set` file (the first `--eval-set-prompts`), its category the
    file's stem: a held-out figure is named by the set it was measured on."""
    prompts: list[Prompt] = []
    for name in eval_set_names(args):
        path = Path(name)
        records = read_corpus(path)[: args.eval_set_prompts or None]
        stem = path.name.removesuffix(".gz").removesuffix(".jsonl")
        prompts += [(stem, ids) for _, ids in encode_corpus(target, records)]
    return prompts


def _datasets(
    args: argparse.Namespace,
    target: LoadedModel,
    prompts: list[Prompt],
    eval_prompts: list[Prompt],
    taps: tuple[int, ...],
    log,
    stop_at: float | None = None,
) -> tuple[list[Sample], dict, list[Sample]]:
    """The training set and the evaluation prompts' own responses (the held-out loss during
    training), both cached as tokens under `--cache-dir`."""
    data, data_stats = build_dataset(
        target,
        prompts,
        taps,
        args.response_tokens,
        args.gen_batch,
        args.cache_dir,
        log,
        cuda_graphs=not args.eager,
        feature_cache=args.feature_cache,
        stop_at=stop_at,
        temperature=args.response_temperature,
    )
    held_out = (
        build_dataset(
            target,
            eval_prompts,
            taps,
            args.response_tokens,
            args.gen_batch,
            args.cache_dir,
            log,
            cuda_graphs=not args.eager,
            feature_cache=args.feature_cache,
            temperature=args.response_temperature,
        )[0]
        if eval_prompts
        else []
    )
    return data, data_stats, held_out


def _new_drafter(
    args: argparse.Namespace, cfg: DFlashConfig, target: LoadedModel, vocab_ids: np.ndarray | None
) -> DFlashDraftModel:
    """A seeded drafter, initialised at the scale of the target's embedding, on its device,
    with its draft vocabulary (`cfg.draft_vocab_size` ids) when it has one."""
    torch.manual_seed(args.seed)
    draft = DFlashDraftModel(cfg)
    draft.init_weights(args.seed, float(target.model.embed_tokens.weight.detach().float().std()))
    if vocab_ids is not None:
        draft.draft_vocab.copy_(torch.from_numpy(vocab_ids))
    return draft.to(target.device)


def _initial_drafter(
    args: argparse.Namespace,
    cfg: DFlashConfig,
    target: LoadedModel,
    data: list[Sample],
    held_out: list[Sample],
) -> tuple[DFlashDraftModel, dict[str, Any] | None]:
    """`--init-from`: that drafter's weights, in training precision on the target's device,
    where it fits this run's drafter (same target, taps, layers, block), and the card's record
    of its draft vocabulary counted against this run's data. Training then goes on from them:
    a device session's ~10 minutes add to the last session's instead of starting again."""
    draft = dflash_model.load(args.init_from, device=target.device, dtype=torch.float32)
    given, wanted = asdict(draft.config), asdict(cfg)
    keys = [k for k in wanted if k not in ("training", "draft_vocab_size")]
    if differ := [k for k in keys if not _same(given.get(k), wanted[k])]:
        raise ValueError(
            f"--init-from {args.init_from}: its {', '.join(differ)} differ from this run's "
            f"drafter ({', '.join(f'{k}={given.get(k)} vs {wanted[k]}' for k in differ)})"
        )
    ids = draft.draft_vocab
    if ids is None:
        return draft.train(), None
    counts = vocab.response_counts(data, cfg.target_vocab_size)
    held = vocab.response_counts(held_out, cfg.target_vocab_size) if held_out else None
    source = f"training responses (ids kept from --init-from {args.init_from})"
    record = vocab.record(ids.cpu().numpy(), len(ids), source, counts, held)
    return draft.train(), record


def _same(a: Any, b: Any) -> bool:
    """Config values alike; floats as saved (an eps read back from JSON through float32)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6)
    return a == b


def _control(args: argparse.Namespace, t_start: float) -> RunControl:
    """`--resume`, `--stop-after-minutes` (from the start of this call) and
    `--checkpoint-minutes`; checkpoints in `--out`/checkpoint."""
    return RunControl(
        folder=args.out / "checkpoint",
        resume=args.resume,
        stop_at=None if args.stop_after_minutes is None else t_start + 60 * args.stop_after_minutes,
        every_s=60 * args.checkpoint_minutes,
    )


def _settings(args: argparse.Namespace) -> TrainSettings:
    return TrainSettings(
        steps=args.steps,
        minutes=args.minutes,
        lr=args.lr,
        anchors=args.anchors,
        seqs_per_step=args.seqs_per_step,
        gamma=args.gamma,
        seed=args.seed,
        blocks_per_row=args.blocks_per_row,
        attention=args.attention,
    )


def _evaluate_trained(
    args: argparse.Namespace,
    target: LoadedModel,
    eval_prompts: list[Prompt],
    held_out: list[Sample],
) -> dict[str, dict[str, Any]]:
    """Held-out tau of the drafter just saved in `--out` ({} without evaluation prompts)."""
    if not eval_prompts:
        return {}
    # Greedy decoding's prefix property: the held-out responses cut to eval_tokens are what a
    # plain run of eval_tokens would write, so evaluation need not generate them again
    # (evaluation is greedy: sampled held-out responses are not its references).
    references = (
        [s.tokens[s.prompt_len :][: args.eval_tokens] for s in held_out]
        if args.response_tokens >= args.eval_tokens and args.response_temperature <= 0
        else None
    )
    return evaluate(
        target,
        args.out,
        eval_prompts,
        args.eval_tokens,
        args.block_size,
        args.eval_budget,
        cuda_graphs=not args.eager,
        references=references,
    )


#: Flags of how this call ran, not of what it trained (`--steps`: the card pins it).
LOCAL_FLAGS = (
    "steps",
    "out",
    "cache_dir",
    "resume",
    "stop_after_minutes",
    "checkpoint_minutes",
    "export_checkpoint",
)


def reproduce_command(args: argparse.Namespace) -> str:
    """The command line that repeats this run: every flag set, `--out` last, without `--steps`
    (the card says how to pin the step count) and the flags of how one call ran (LOCAL_FLAGS)."""
    return (
        "python -m specscope.engine.train_dflash "
        + " ".join(
            f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}")
            for k, v in sorted(vars(args).items())
            if v is not None and v is not False and k not in LOCAL_FLAGS
        )
        + f" --out {args.out}"
    )


def _card(
    args: argparse.Namespace,
    target: LoadedModel,
    cfg: DFlashConfig,
    draft: DFlashDraftModel,
    prompts: list[Prompt],
    data: dict[str, Any],
    settings: TrainSettings,
    history: dict[str, Any],
    evaluation: dict[str, dict[str, Any]],
    t_start: float,
) -> dict[str, Any]:
    """Everything the card says about this run, in card.json's order."""
    return {
        "target": target.name,
        "command": reproduce_command(args),
        "device": args.device,
        "target_dtype": str(target.dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "drafter": asdict(cfg),
        "parameters": sum(p.numel() for p in draft.parameters()),
        "save_dtype": args.save_dtype,
        "file_mb": (args.out / dflash_model.WEIGHTS_FILE).stat().st_size / 1e6,
        "corpus": None if args.corpus is None else str(args.corpus),
        "eval_sets": eval_set_names(args) or None,
        "categories": sorted(dict.fromkeys(c for c, _ in prompts)),
        "prompts_per_category": args.prompts_per_category,
        "response_tokens": args.response_tokens,
        "response_temperature": args.response_temperature,
        "data": data,
        "settings": asdict(settings),
        "training": history,
        "evaluation": evaluation,
        "eval_tokens": args.eval_tokens,
        "eval_budget": args.eval_budget,
        "expected_commit_from_train_accuracy": round(
            expected_commit(np.array(history["slot_accuracy_last"])), 3
        ),
        "wall_s": round(time.perf_counter() - t_start, 1),
    }


def run(
    args: argparse.Namespace,
    target: LoadedModel | None = None,
    prompts: list[Prompt] | None = None,
    eval_prompts: list[Prompt] | None = None,
    log=print,
) -> dict[str, Any]:
    """The whole pipeline; tests pass a tiny target and token prompts instead of text ones.
    Raises checkpoint.Stopped where `--stop-after-minutes` passes before the run's end (its
    progress saved: tokens generated so far, a training checkpoint)."""
    t_start = time.perf_counter()
    _configure_torch(args)
    target = target or _load_target(args)
    if prompts is None:
        prompts, eval_prompts = _text_prompts(args, target)
    prompts, eval_prompts, split_stats = distinct_split(prompts, eval_prompts or [])
    log(f"data: {split_stats}")
    if args.evaluate_only:
        return reevaluate(args, target, eval_prompts, log)
    if args.draft_vocab_only:
        return vocab.restrict_saved(args, target, prompts, eval_prompts, log)
    cfg = DFlashConfig.for_target(
        target.name, target.config, num_layers=args.draft_layers, block_size=args.block_size
    )
    control = _control(args, t_start)
    data, data_stats, held_out = _datasets(
        args, target, prompts, eval_prompts, tuple(cfg.target_layer_ids), log, control.stop_at
    )
    if args.init_from is not None:
        draft, vocab_record = _initial_drafter(args, cfg, target, data, held_out)
        cfg = draft.config  # one config, the drafter's: its shape was checked against this run's
    else:
        vocab_ids, vocab_record = vocab.for_run(
            args.draft_vocab, cfg.target_vocab_size, data, held_out
        )
        if vocab_ids is not None:
            cfg.draft_vocab_size = len(vocab_ids)
        draft = _new_drafter(args, cfg, target, vocab_ids)
    if vocab_record is not None:
        log(f"draft vocabulary: {json.dumps(vocab_record)}")
    settings = _settings(args)
    history = train(draft, target, data, settings, log, held_out=held_out, control=control)
    record = {
        "steps": history["steps"],
        "seed": args.seed,
        "gamma": args.gamma,
        "sequences": data_stats["sequences"],
    }
    if args.init_from is not None:  # the lineage: what the drafter it went on from had had
        record["init_from"] = cfg.training
    cfg.training = record
    save_dtype = torch.bfloat16 if args.save_dtype == "bfloat16" else torch.float32
    dflash_model.save(draft, args.out, dtype=save_dtype)
    evaluation = _evaluate_trained(args, target, eval_prompts, held_out)
    card = _card(
        args,
        target,
        cfg,
        draft,
        prompts,
        {**data_stats, **split_stats},
        settings,
        history,
        evaluation,
        t_start,
    )
    card["draft_vocab"] = vocab_record
    write_card(args.out, card)
    log(f"wrote {args.out} ({card['file_mb']:.1f} MB), evaluation {json.dumps(evaluation)}")
    return card


def reevaluate(
    args: argparse.Namespace,
    target: LoadedModel,
    eval_prompts: list[Prompt],
    log=print,
) -> dict[str, Any]:
    """`--evaluate-only`: held-out tau of the drafter in `--out` (trained by an earlier run, whose
    card it updates), e.g. on another device or with the fast path the training run lacked."""
    card_path = args.out / "card.json"
    if not card_path.exists():
        raise FileNotFoundError(
            f"{card_path}: --evaluate-only needs a drafter trained by this command"
        )
    card = json.loads(card_path.read_text())
    block = int(card["drafter"]["block_size"])
    t0 = time.perf_counter()
    card["evaluation"] = evaluate(
        target,
        args.out,
        eval_prompts,
        args.eval_tokens,
        block,
        args.eval_budget,
        cuda_graphs=not args.eager,
    )
    card["eval_tokens"], card["eval_budget"] = args.eval_tokens, args.eval_budget
    card["eval_device"] = args.device
    card.setdefault("notes", []).append(
        f"evaluation re-run by --evaluate-only on {args.device} ({time.perf_counter() - t0:.0f} s)"
    )
    write_card(args.out, card)
    log(f"evaluation {json.dumps(card['evaluation'])}")
    return card
