"""The training set: target-generated sequences with their tapped features, cached on disk.

Generating the responses and running the target over them is the slow part of a run and the
same for every run with the same inputs, so a dataset is stored once under a key of everything
that determines it (target, layer count, dtype, response length, taps, prompts) and read back
by the next run: retraining with other settings costs only the training.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from specscope.engine.loader import LoadedModel
from specscope.engine.training.prompts import Prompt
from specscope.engine.training.target import generate, target_features


@dataclass
class Sample:
    category: str
    tokens: list[int]  # prompt + target-generated response
    prompt_len: int
    hidden: torch.Tensor  # [len(tokens), n_taps * D], the target's tapped layer outputs


def _cache_key(
    loaded: LoadedModel, prompts: list[Prompt], max_new: int, taps: tuple[int, ...]
) -> str:
    blob = json.dumps(
        [loaded.name, loaded.config.num_layers, str(loaded.dtype), max_new, list(taps), prompts]
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _load_cached(path: Path) -> tuple[list[Sample], dict]:
    """The samples and their stats as `_save_cached` wrote them."""
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    meta = json.loads((path.with_suffix(".json")).read_text())
    samples = [
        Sample(
            m["category"],
            tensors[f"tokens{i}"].tolist(),
            m["prompt_len"],
            tensors[f"hidden{i}"],
        )
        for i, m in enumerate(meta["samples"])
    ]
    return samples, meta["stats"]


def _save_cached(path: Path, samples: list[Sample], stats: dict) -> None:
    """Tokens and features in one safetensors file; categories, prompt lengths and stats in a
    JSON file beside it."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(
        {
            **{f"tokens{i}": torch.tensor(s.tokens) for i, s in enumerate(samples)},
            **{f"hidden{i}": s.hidden for i, s in enumerate(samples)},
        },
        str(path),
    )
    path.with_suffix(".json").write_text(
        json.dumps(
            {
                "stats": stats,
                "samples": [{"category": s.category, "prompt_len": s.prompt_len} for s in samples],
            }
        )
    )


def build_dataset(
    loaded: LoadedModel,
    prompts: list[Prompt],
    taps: tuple[int, ...],
    max_new: int,
    batch: int,
    cache_dir: Path | None,
    log=print,
    cuda_graphs: bool = True,
) -> tuple[list[Sample], dict]:
    """Target-generated responses + their features, from the cache when present."""
    key = _cache_key(loaded, prompts, max_new, taps)
    path = cache_dir / f"dflash-data-{key}.safetensors" if cache_dir else None
    if path is not None and path.exists():
        samples, stats = _load_cached(path)
        log(f"data: {len(samples)} sequences from the cache {path}")
        return samples, {**stats, "cache": str(path), "cached": True}
    t0 = time.perf_counter()
    responses, _ = generate(
        loaded, [p for _, p in prompts], max_new, batch, cuda_graphs=cuda_graphs
    )
    gen_s = time.perf_counter() - t0
    samples = []
    for (cat, prompt), resp in zip(prompts, responses, strict=True):
        tokens = prompt + resp
        samples.append(Sample(cat, tokens, len(prompt), target_features(loaded, tokens, taps)))
    stats = {
        "sequences": len(samples),
        "prompt_tokens": sum(s.prompt_len for s in samples),
        "response_tokens": sum(len(s.tokens) - s.prompt_len for s in samples),
        "generate_s": round(gen_s, 1),
        "features_s": round(time.perf_counter() - t0 - gen_s, 1),
    }
    log(f"data: {stats}")
    if path is not None:
        _save_cached(path, samples, stats)
    return samples, {**stats, "cache": str(path) if path else None, "cached": False}
