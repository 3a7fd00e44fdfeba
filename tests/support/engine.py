"""Drive an EngineBackend to completion in tests: prefill every prompt, step until all finish,
optionally release them and check every KV page came back."""

from __future__ import annotations

from specscope.backend import SamplingParams
from specscope.engine.backend import EngineBackend

MAX_STEPS = 200


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
