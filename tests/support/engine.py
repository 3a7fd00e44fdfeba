"""Drive an EngineBackend to completion in tests: prefill every prompt, step until all finish,
optionally release them and check every KV page came back."""

from __future__ import annotations

from specscope.backend import SamplingParams
from specscope.engine.backend import EngineBackend
from specscope.engine.factory import assemble
from specscope.engine.kv_cache import KVCache
from specscope.engine.options import EngineOptions

MAX_STEPS = 200
# Repeating token patterns: prompt lookup finds matches, so drafts are made and some accepted.
PROMPTS = [
    [5, 17, 23, 42, 8, 5, 17, 23, 42, 8, 5, 17, 23],
    [61, 3, 3, 70, 61, 3, 3, 70, 61, 3],
    [11, 12, 13, 14, 15, 16, 11, 12, 13, 14, 11, 12],
]
MAX_TOKENS = 24
GREEDY = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
NGRAM = {"drafter": "ngram", "ngram_min": 1}


def tiny_model():
    """A tiny random Llama (fp32, CPU) for a module's tests, on one intra-op thread: the shared
    cores are oversubscribed and torch's spinning worker threads then slow every small forward
    down several-fold. Restored afterwards. Use as a module fixture."""
    import torch

    from specscope.engine.loader import TINY_CONFIG, random_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield random_model(TINY_CONFIG, device="cpu", dtype=torch.float32, seed=3)
    torch.set_num_threads(threads)


def tiny_dflash(target_config, block_size: int = 6, target_layer_ids=None):
    """A random 2-layer DFlash drafter (fp32, CPU, eval mode) for a tiny target, its weights
    x10 over N(0, 0.02) so that its drafts depend visibly on the context features: a wrong
    context row changes them."""
    import dataclasses

    import torch

    from specscope.engine.speculative import dflash_model

    cfg = dflash_model.DFlashConfig.for_target(
        "tiny", target_config, num_layers=2, block_size=block_size, num_taps=2
    )
    if target_layer_ids is not None:
        cfg = dataclasses.replace(cfg, target_layer_ids=list(target_layer_ids))
    model = dflash_model.DFlashDraftModel(cfg)
    model.init_weights(seed=1, embed_std=1.0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(10)
    return model.eval()


def backend_for(loaded, page_size: int, policy: str = "contiguous", **spec) -> EngineBackend:
    """An engine over `loaded` with its own KV cache (2,048 tokens) and these engine flags."""
    kv = KVCache.for_model(
        loaded.config, pool_tokens=2048 // page_size * page_size, page_size=page_size, policy=policy
    )
    opts = EngineOptions.from_flags(page_size=page_size, kv_alloc=policy, max_batch=4, **spec)
    return assemble(loaded, kv, opts)


def run_to_end(backend: EngineBackend, prompts, params: SamplingParams, *, release: bool = True):
    """(tokens per prompt, the steps taken). With `release`, the requests are freed and the KV
    cache must be whole again (no page leaked by speculation)."""
    ids = [f"r{i}" for i in range(len(prompts))]
    for rid, p in zip(ids, prompts, strict=True):
        backend.prefill_sync(rid, p, params)
    out = {rid: [] for rid in ids}
    steps = []
    for _ in range(MAX_STEPS):
        live = [rid for rid in ids if not backend.requests[rid].finished]
        if not live:
            break
        step = backend.step_sync(live)
        steps.append(step)
        for o in step.outputs:
            out[o.request_id].extend(o.tokens)
    if release:
        for rid in ids:
            backend.release(rid)
        assert backend.kv.free_pages == backend.kv.num_pages
    return [out[rid] for rid in ids], steps
