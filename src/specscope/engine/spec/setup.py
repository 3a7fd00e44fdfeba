"""Turn the speculation options of `build_backend` into a drafter + stepper on an EngineBackend.

Options: drafter "none" | "ngram" | "model:PATH" (PATH as for --model: "smollm2", a .gguf file or
a Hugging Face folder; same vocabulary as the target) | "layers:N" (early exit: the target's own
first N layers, weights shared), verify "chain" | "tree",
num_draft_tokens (k), budget (tree nodes), draft_window (W tokens the drafter sees; 0 = all),
tree_kv "compact" | "inplace", ngram_min / ngram_max / ngram_candidates, draft_top_k.

ngram_min defaults to 3: on this CPU a 5-token verify costs ~1.3-1.5x a 1-token decode, so
speculation only pays when drafts are usually right; 1- and 2-token matches mostly are not
(bench/engine_spec.py: min 1 lost ~10% on code completion, min 3 broke even there and won on edits).
"""

from __future__ import annotations

from specscope.engine.spec.drafter import Drafter
from specscope.engine.spec.ngram import NgramDrafter
from specscope.engine.spec.stepper import SpecConfig, SpeculativeStepper

SPEC_OPTIONS = (
    "drafter", "verify", "num_draft_tokens", "budget", "draft_window", "tree_kv",
    "ngram_min", "ngram_max", "ngram_candidates", "draft_top_k",
)


def make_drafter(
    backend,
    drafter: str,
    *,
    num_draft_tokens: int,
    verify: str,
    budget: int,
    draft_window: int | None,
    ngram_min: int = 3,
    ngram_max: int = 4,
    ngram_candidates: int | None = None,
    draft_top_k: int | None = None,
) -> Drafter:
    if drafter == "ngram":
        candidates = ngram_candidates or (4 if verify == "tree" else 1)
        return NgramDrafter(ngram_min, ngram_max, candidates, draft_window or None)
    if drafter.startswith(("model:", "layers:")):
        from specscope.engine.kv_cache import KVCache
        from specscope.engine.loader import load_model
        from specscope.engine.spec.engine_lm import EngineLM, early_exit_model
        from specscope.engine.spec.model_drafter import ModelDrafter

        if drafter.startswith("layers:"):  # early exit: the target's first N layers
            n_layers = int(drafter.removeprefix("layers:"))
            model, name, dtype, device = early_exit_model(backend.model, n_layers), drafter, backend.lm.dtype, backend.lm.device
        else:
            path = drafter.removeprefix("model:") or "smollm2"
            loaded = load_model(path, device=str(backend.lm.device), dtype=backend.lm.dtype)
            if loaded.config.vocab_size != backend.lm.config.vocab_size:
                raise ValueError(
                    f"draft model {path} has vocabulary {loaded.config.vocab_size}, "
                    f"target has {backend.lm.config.vocab_size}: they must match"
                )
            model, name, dtype, device = loaded.model, f"model:{loaded.name}", loaded.dtype, loaded.device
        cfg = model.cfg
        page = backend.kv.page_size
        pool = backend.kv.num_pages * page  # as large as the target's: see EngineLM.max_rows
        window_rows = (draft_window + draft_window // 4 + num_draft_tokens + 1) if draft_window else None

        def rows(request_id: str) -> int:
            target = backend.requests[request_id].seq.reserved_pages * page
            return min(target, window_rows) if window_rows else target

        kv = KVCache.for_model(cfg, pool_tokens=pool // page * page or page, page_size=page,
                               dtype=dtype, device=device)
        top_k = draft_top_k or (min(8, budget) if verify == "tree" else 1)
        return ModelDrafter(EngineLM(model, kv, rows), top_k=top_k, draft_window=draft_window or None, name=name)
    raise ValueError(f"unknown drafter {drafter!r} (expected none, ngram, model:PATH or layers:N)")


def attach_speculation(
    backend,
    *,
    drafter: str | None = "none",
    verify: str = "chain",
    num_draft_tokens: int = 4,
    budget: int = 16,
    draft_window: int | None = None,
    tree_kv: str = "compact",
    **drafter_options,
) -> SpeculativeStepper | None:
    """Configure `backend` to decode speculatively; returns None (no change) for drafter none."""
    if not drafter or drafter == "none":
        return None
    config = SpecConfig(verify=verify, num_draft_tokens=num_draft_tokens, budget=budget, tree_kv=tree_kv)
    made = make_drafter(backend, drafter, num_draft_tokens=num_draft_tokens, verify=verify, budget=budget,
                        draft_window=draft_window, **drafter_options)
    stepper = SpeculativeStepper(made, config)
    stepper.attach(backend)
    return stepper
