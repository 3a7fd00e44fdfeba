"""The training set: target-generated sequences (tokens, stored once) and their tapped features.

Generating the responses is the slow part of preparing a run and the same for every run with
the same inputs, so the tokens are stored under a key of everything that determines them
(target, layer count, dtype, response length, prompts, and the temperature where responses are
sampled: each prompt's draw is seeded from its tokens, `target.prompt_seed`), in shards of at
most `SHARD_BYTES` written as they complete: a call stopped (or killed) part way continues from
the last shard, a resumed run does not generate again, and the shards are files small enough to
move between machines.

Features (the target's tapped hidden states, 5 x 576 bf16 = 5.8 KB a token for SmolLM2) are
NOT kept for a big corpus: 10M tokens would be 58 GB. `--feature-cache`:
- `off`: each step runs the target once over its own sequences (`target.batch_features`, one
  batched forward: milliseconds on a GPU against the drafter step's tens), nothing stored;
- `on`: computed once (batched) and kept in host memory, and on disk beside the tokens;
- `auto` (default): `on` on the CPU when they fit in `FEATURE_CACHE_BYTES` (a CPU target
  forward costs more than the small drafter's step, and CPU data sets are small), else `off`.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from specscope.engine.loader import LoadedModel
from specscope.engine.training.checkpoint import Stopped
from specscope.engine.training.prompts import Prompt
from specscope.engine.training.target import Generator, batch_features

SHARD_BYTES = 15_000_000  # a shard of tokens: one file that moves between machines
FEATURE_CACHE_BYTES = 8 << 30  # `auto` caches features up to this much host memory
FEATURE_GROUP = 8  # sequences per batched target forward when caching features
# the features' dtype, cached or computed per step: both modes train on the same inputs
FEATURE_DTYPE = torch.bfloat16


@dataclass
class Sample:
    category: str
    tokens: list[int]  # prompt + target-generated response
    prompt_len: int
    hidden: torch.Tensor | None = None  # [len(tokens), n_taps * D] if cached, else per step


def _cache_key(
    loaded: LoadedModel, prompts: list[Prompt], max_new: int, temperature: float = 0.0
) -> str:
    """Greedy responses keep the key they had before sampling existed (caches stay valid)."""
    key: list = [loaded.name, loaded.config.num_layers, str(loaded.dtype), max_new, prompts]
    if temperature > 0:
        key.append({"temperature": temperature})
    blob = json.dumps(key)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _save_shard(path: Path, samples: list[Sample], generate_s: float) -> None:
    """The shard's tokens (uint16 when the vocabulary allows: 2 bytes a token), lengths and
    prompt lengths; categories and generation time in the file's metadata."""
    from safetensors.torch import save_file

    flat = torch.tensor([t for s in samples for t in s.tokens], dtype=torch.int32)
    narrow = flat.numel() == 0 or int(flat.max()) < 1 << 16
    save_file(
        {
            "tokens": flat.to(torch.uint16) if narrow else flat,
            "lengths": torch.tensor([len(s.tokens) for s in samples], dtype=torch.int32),
            "prompt_lens": torch.tensor([s.prompt_len for s in samples], dtype=torch.int32),
        },
        str(path.with_suffix(".tmp")),
        metadata={
            "categories": json.dumps([s.category for s in samples]),
            "generate_s": str(generate_s),
        },
    )
    path.with_suffix(".tmp").replace(path)  # a shard is there whole or not at all


def _load_shard(path: Path) -> tuple[list[Sample], float]:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
        flat = f.get_tensor("tokens").to(torch.int64).tolist()
        lengths, prompt_lens = (
            f.get_tensor("lengths").tolist(),
            f.get_tensor("prompt_lens").tolist(),
        )
    cats, samples, at = json.loads(meta["categories"]), [], 0
    for cat, n, p in zip(cats, lengths, prompt_lens, strict=True):
        samples.append(Sample(cat, flat[at : at + n], p))
        at += n
    return samples, float(meta["generate_s"])


def shard_size(prompts: list[Prompt], max_new: int, batch: int) -> int:
    """Prompts per shard: at most SHARD_BYTES of tokens, and 16 batches (a shard's worth of
    generation is what a stopped call can lose)."""
    longest = max(len(p) for _, p in prompts) + max_new
    return max(1, min(16 * batch, SHARD_BYTES // (4 * longest)))


def _generate(gen: Generator, part: list[Prompt]) -> tuple[list[Sample], float]:
    """One shard's samples, generated, and the seconds it took."""
    t0 = time.perf_counter()
    got = [Sample(c, list(p), len(p)) for c, p in part]
    for i, resp in gen.stream([p for _, p in part]):
        got[i].tokens.extend(resp)
    return got, time.perf_counter() - t0


def generate_samples(
    loaded: LoadedModel,
    prompts: list[Prompt],
    max_new: int,
    batch: int,
    folder: Path | None,
    cuda_graphs: bool = True,
    stop_at: float | None = None,
    log=print,
    temperature: float = 0.0,
) -> tuple[list[Sample], float, bool]:
    """(samples, generation seconds, all read from `folder`): each shard from its file when
    present, else generated and written. Past `stop_at` (perf_counter), raises Stopped after a
    generated shard while shards remain."""
    per = shard_size(prompts, max_new, batch)
    samples: list[Sample] = []
    gen: Generator | None = None
    seconds, cached = 0.0, True
    for first in range(0, len(prompts), per):
        path = folder / f"tokens-{first // per:05d}.safetensors" if folder else None
        if path is not None and path.exists():
            got, s = _load_shard(path)
        else:
            longest = max(len(p) for _, p in prompts)
            gen = gen or Generator(
                loaded, longest, max_new, batch, cuda_graphs=cuda_graphs, temperature=temperature
            )
            (got, s), cached = _generate(gen, prompts[first : first + per]), False
            if path is not None:
                _save_shard(path, got, s)
            if stop_at is not None and time.perf_counter() > stop_at and first + per < len(prompts):
                raise Stopped(f"generation: {first + per} of {len(prompts)} prompts done")
        samples += got
        seconds += s
    log(f"data: {len(samples)} sequences ({'from' if cached else 'written to'} {folder})")
    return samples, seconds, cached


def cache_features(
    loaded: LoadedModel, samples: list[Sample], taps: tuple[int, ...], path: Path | None
) -> None:
    """Every sample's features into `sample.hidden` (bf16, host): from `path` when present,
    else by batched target forwards (similar lengths together: little padding), then saved."""
    from safetensors.torch import load_file, save_file

    if path is not None and path.exists():
        stored = load_file(str(path))
        for i, s in enumerate(samples):
            s.hidden = stored[f"hidden{i}"]
        return
    order = sorted(range(len(samples)), key=lambda i: len(samples[i].tokens))
    for g in range(0, len(order), FEATURE_GROUP):
        group = [samples[i] for i in order[g : g + FEATURE_GROUP]]
        feats = batch_features(loaded, [s.tokens for s in group], taps)
        for s, f in zip(group, feats, strict=True):
            s.hidden = f[: len(s.tokens)].to("cpu", FEATURE_DTYPE).clone()
    if path is not None:
        save_file({f"hidden{i}": s.hidden for i, s in enumerate(samples)}, str(path) + ".tmp")
        Path(str(path) + ".tmp").replace(path)  # whole or absent, like the token shards


def use_feature_cache(
    loaded: LoadedModel, samples: list[Sample], taps: tuple[int, ...], mode: str
) -> bool:
    """`--feature-cache` resolved: `auto` caches on the CPU what fits FEATURE_CACHE_BYTES."""
    if mode not in ("auto", "on", "off"):
        raise ValueError(f"--feature-cache must be auto, on or off, not {mode!r}")
    if mode != "auto":
        return mode == "on"
    size = sum(len(s.tokens) for s in samples) * len(taps) * loaded.config.hidden_size * 2
    return loaded.device.type == "cpu" and size <= FEATURE_CACHE_BYTES


def step_features(
    loaded: LoadedModel, taps: tuple[int, ...], samples: list[Sample], length: int
) -> torch.Tensor:
    """Features [G, length, F] of positions 0..length-1 of a step's sequences (zero past a
    sequence's end), on the target's device: the cached ones, else one batched target forward."""
    if any(s.hidden is None for s in samples):
        return batch_features(loaded, [s.tokens[:length] for s in samples], taps).to(FEATURE_DTYPE)
    width = samples[0].hidden.shape[1]
    out = torch.zeros(len(samples), length, width, dtype=samples[0].hidden.dtype)
    for i, s in enumerate(samples):
        n = min(length, len(s.tokens))
        out[i, :n] = s.hidden[:n]
    return out.to(loaded.device)


def build_dataset(
    loaded: LoadedModel,
    prompts: list[Prompt],
    taps: tuple[int, ...],
    max_new: int,
    batch: int,
    cache_dir: Path | None,
    log=print,
    cuda_graphs: bool = True,
    feature_cache: str = "auto",
    stop_at: float | None = None,
    temperature: float = 0.0,
) -> tuple[list[Sample], dict]:
    """Target-generated sequences (tokens from the cache when there), with their features
    cached or left to each step (see the module docstring)."""
    key = _cache_key(loaded, prompts, max_new, temperature)
    folder = cache_dir / f"dflash-data-{key}" if cache_dir else None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    samples, gen_s, cached = generate_samples(
        loaded, prompts, max_new, batch, folder, cuda_graphs, stop_at, log, temperature
    )
    t0 = time.perf_counter()
    cache = use_feature_cache(loaded, samples, taps, feature_cache)
    if cache:
        name = "features-" + "-".join(map(str, taps)) + ".safetensors"
        cache_features(loaded, samples, taps, folder / name if folder else None)
    stats = {
        "sequences": len(samples),
        "prompt_tokens": sum(s.prompt_len for s in samples),
        "response_tokens": sum(len(s.tokens) - s.prompt_len for s in samples),
        "generate_s": round(gen_s, 1),
        "features_s": round(time.perf_counter() - t0, 1) if cache else None,
        "features": "cached" if cache else "per step",
    }
    log(f"data: {stats}")
    return samples, {**stats, "cache": str(folder) if folder else None, "cached": cached}
