"""build_backend(**options): what `specscope serve --backend engine` calls.

Options it reads (others, e.g. the speculation ones ENGINE2 handles, are ignored here):
model ("smollm2" | .gguf path | Hugging Face folder), device ("cpu" | "cuda"), page_size,
kv_alloc ("contiguous" | "scattered"), max_batch, kv_pool_tokens (pool size; default fits
max_batch full-context requests, capped to keep CPU memory modest), seed.
"""

from __future__ import annotations

from typing import Any

import torch

from specscope.engine.backend import EngineBackend
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import load_model
from specscope.engine.spec.setup import SPEC_OPTIONS, attach_speculation

CPU_POOL_CAP_TOKENS = 16384  # ~0.75 GB of fp32 K/V for SmolLM2-135M
GPU_POOL_CAP_TOKENS = 262144


def build_backend(
    model: str = "smollm2",
    device: str = "cpu",
    page_size: int = 16,
    kv_alloc: str = "contiguous",
    max_batch: int = 8,
    kv_pool_tokens: int | None = None,
    seed: int | None = None,
    **_ignored: Any,
) -> EngineBackend:
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device")
    loaded = load_model(model or "smollm2", device=device)
    cfg = loaded.config
    if kv_pool_tokens is None:
        cap = GPU_POOL_CAP_TOKENS if device == "cuda" else CPU_POOL_CAP_TOKENS
        kv_pool_tokens = min(max_batch * cfg.max_position_embeddings, cap)
    kv = KVCache.for_model(
        cfg, pool_tokens=kv_pool_tokens // page_size * page_size or page_size,
        page_size=page_size, policy=kv_alloc, dtype=loaded.dtype, device=loaded.device,
        seed=seed or 0,
    )
    backend = EngineBackend(loaded, kv, max_batch=max_batch, seed=seed)
    # ENGINE2: speculation options (drafter, verify, num_draft_tokens, budget, draft_window,
    # tree_kv, ...; see engine/spec/setup.py). drafter none/absent leaves plain decoding.
    spec = {k: v for k, v in _ignored.items() if k in SPEC_OPTIONS and v is not None}
    attach_speculation(backend, **spec)
    return backend
