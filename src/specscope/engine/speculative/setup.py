"""A speculative stepper from `SpeculationOptions`: the drafter it names, on the target's model.

drafter "ngram" (prompt lookup), "model:PATH" (PATH as for --model: "smollm2", a .gguf file or a
Hugging Face folder; same vocabulary as the target) or "layers:N" (early exit: the target's own
first N layers, weights shared) or "dflash:PATH" (a DFlash block drafter folder, or a shipped
name such as "smollm2"; conditioned on the target's hidden states, sharing its embedding and head).
`cuda_graphs` (EngineOptions.cuda_graphs; the benches' --eager turns it off): on CUDA the DFlash
drafter's batch-1 step runs as CUDA graphs too.
"""

from __future__ import annotations

from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import LoadedModel, load_model
from specscope.engine.options import SpeculationOptions
from specscope.engine.speculative import dflash_model
from specscope.engine.speculative.dflash import DFlashDrafter
from specscope.engine.speculative.drafter import Drafter
from specscope.engine.speculative.faults import with_faults
from specscope.engine.speculative.model_drafter import EngineLM, ModelDrafter, early_exit_model
from specscope.engine.speculative.ngram import NgramDrafter
from specscope.engine.speculative.stepper import SpeculativeStepper


def make_stepper(
    target: LoadedModel,
    target_kv: KVCache,
    opts: SpeculationOptions,
    *,
    cuda_graphs: bool = False,
    torch_compile: bool = False,
) -> SpeculativeStepper:
    if opts.tree_kv == "inplace" and target_kv.page_size != 1:
        raise ValueError("tree_kv inplace rewrites the page table per token: needs page_size 1")
    drafter = with_faults(
        make_drafter(target, target_kv, opts, cuda_graphs=cuda_graphs, torch_compile=torch_compile),
        opts.faults,
        target.config.vocab_size,
    )
    return SpeculativeStepper(drafter, opts)


def make_drafter(
    target: LoadedModel,
    target_kv: KVCache,
    opts: SpeculationOptions,
    *,
    cuda_graphs: bool = False,
    torch_compile: bool = False,
) -> Drafter:
    if opts.drafter == "ngram":
        candidates = opts.ngram_candidates or (4 if opts.verify == "tree" else 1)
        return NgramDrafter(opts.ngram_min, opts.ngram_max, candidates, opts.draft_window or None)
    if opts.drafter.startswith("dflash:"):
        return make_dflash_drafter(
            target, opts, cuda_graphs=cuda_graphs, torch_compile=torch_compile
        )
    if opts.drafter.startswith("layers:"):  # early exit: the target's first N layers
        model = early_exit_model(target.model, int(opts.drafter.removeprefix("layers:")))
        name, dtype, device = opts.drafter, target.dtype, target.device
    else:
        path = opts.drafter.removeprefix("model:") or "smollm2"
        loaded = load_model(path, device=str(target.device), dtype=target.dtype)
        if loaded.config.vocab_size != target.config.vocab_size:
            raise ValueError(
                f"draft model {path} has vocabulary {loaded.config.vocab_size}, "
                f"target has {target.config.vocab_size}: they must match"
            )
        model, name, dtype, device = (
            loaded.model,
            f"model:{loaded.name}",
            loaded.dtype,
            loaded.device,
        )
    page = target_kv.page_size
    pool = target_kv.num_pages * page  # as large as the target's: see EngineLM.max_rows
    window = opts.draft_window
    window_rows = (window + window // 4 + opts.num_draft_tokens + 1) if window else None

    def rows(request_id: str) -> int:
        reserved = target_kv.seqs[request_id].reserved_pages * page
        return min(reserved, window_rows) if window_rows else reserved

    kv = KVCache.for_model(
        model.cfg,
        pool_tokens=pool // page * page or page,
        page_size=page,
        dtype=dtype,
        device=device,
    )
    top_k = opts.draft_top_k or (min(8, opts.budget) if opts.verify == "tree" else 1)
    return ModelDrafter(
        EngineLM(model, kv, rows), top_k=top_k, draft_window=window or None, name=name
    )


def make_dflash_drafter(
    target: LoadedModel,
    opts: SpeculationOptions,
    *,
    cuda_graphs: bool = False,
    torch_compile: bool = False,
) -> DFlashDrafter:
    """The DFlash drafter; on CUDA with graphs its step is captured (`torch_compile`: fused
    first, dflash_graph.py)."""
    ref = opts.drafter.removeprefix("dflash:")
    path = dflash_model.resolve_path(ref)
    model = dflash_model.load(path, device=target.device, dtype=target.dtype)
    if opts.num_draft_tokens > model.config.block_size - 1:
        raise ValueError(
            f"--num-draft-tokens {opts.num_draft_tokens}: the DFlash drafter's block of "
            f"{model.config.block_size} drafts at most {model.config.block_size - 1}"
        )
    top_k = opts.draft_top_k or (min(8, opts.budget) if opts.verify == "tree" else 1)
    drafter = DFlashDrafter(
        model,
        target.model,
        top_k=top_k,
        draft_window=opts.draft_window or None,
        name=f"dflash:{path.name}",
        path="graph" if cuda_graphs and target.device.type == "cuda" else "ring",
        compile=torch_compile,
        attention=opts.draft_attention,  # None: the device's (dflash_block.block_attention)
        verify_rows=opts.max_nodes,  # a verify's rows an update is staged from
    )
    drafter.warmup()
    return drafter
