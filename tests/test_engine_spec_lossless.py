"""Speculative decoding in the real engine (SmolLM2-135M weights, fp32, CPU).

Greedy output with every drafter and verification mode equals plain greedy output, for several
prompts decoded together and for page sizes 1 and 16 (and the in-place tree KV at page size 1);
a model drafting for itself accepts every draft; sampling with speculation runs and is
reproducible per seed; releasing a request mid-step frees both the target and the draft cache.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from specscope.engine.backend import EngineBackend  # noqa: E402
from specscope.engine.kv_cache import KVCache  # noqa: E402
from specscope.engine.loader import load_model  # noqa: E402
from specscope.engine.spec.setup import attach_speculation  # noqa: E402
from specscope.serve.backend import SamplingParams  # noqa: E402

pytestmark = pytest.mark.engine

PROMPTS = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "List three colours: red, green,",
]
MAX_TOKENS = 16
MAX_STEPS = 200


@pytest.fixture(scope="module")
def smollm():
    # One intra-op thread: the 2 shared cores are oversubscribed and torch's spinning worker
    # threads then slow every forward down several-fold. Restored afterwards.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_model("smollm2", device="cpu", dtype=torch.float32)
    torch.set_num_threads(threads)


def _backend(loaded, page_size: int, policy: str = "contiguous", **spec) -> EngineBackend:
    cfg = loaded.config
    kv = KVCache.for_model(cfg, pool_tokens=4096 // page_size * page_size, page_size=page_size,
                           policy=policy)
    backend = EngineBackend(loaded, kv, max_batch=4)
    attach_speculation(backend, **spec)
    return backend


def _run(backend: EngineBackend, prompts, params: SamplingParams):
    ids = [f"r{i}" for i in range(len(prompts))]
    for rid, text in zip(ids, prompts, strict=True):
        backend.prefill_sync(rid, backend.tokenize(text), params)
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
    for rid in ids:
        backend.release(rid)
    assert backend.kv.free_pages == backend.kv.num_pages
    return [out[rid] for rid in ids], steps


GREEDY = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def reference(smollm):
    tokens, _ = _run(_backend(smollm, 16), PROMPTS, GREEDY)
    assert all(len(t) == MAX_TOKENS for t in tokens)
    return tokens


@pytest.mark.parametrize(
    ("spec", "page_size", "policy"),
    [
        ({"drafter": "ngram", "verify": "chain", "num_draft_tokens": 4}, 16, "contiguous"),
        ({"drafter": "ngram", "verify": "chain", "num_draft_tokens": 6, "draft_window": 24}, 1, "scattered"),
        ({"drafter": "ngram", "verify": "tree", "num_draft_tokens": 4, "budget": 8}, 16, "scattered"),
        ({"drafter": "ngram", "verify": "tree", "num_draft_tokens": 4, "budget": 8, "tree_kv": "inplace"}, 1, "contiguous"),
        ({"drafter": "layers:8", "verify": "chain", "num_draft_tokens": 4}, 16, "contiguous"),
        ({"drafter": "layers:8", "verify": "tree", "num_draft_tokens": 4, "budget": 12}, 16, "contiguous"),
        ({"drafter": "layers:8", "verify": "tree", "num_draft_tokens": 4, "budget": 12, "tree_kv": "inplace"}, 1, "scattered"),
        ({"drafter": "layers:8", "verify": "tree", "num_draft_tokens": 3, "budget": 6, "draft_window": 16}, 1, "contiguous"),
    ],
    ids=lambda v: v if isinstance(v, str | int) else "-".join(f"{k}={x}" for k, x in v.items()),
)
def test_greedy_speculation_is_lossless(smollm, reference, spec, page_size, policy):
    backend = _backend(smollm, page_size, policy, **spec)
    tokens, steps = _run(backend, PROMPTS, GREEDY)
    assert tokens == reference
    outs = [o for s in steps for o in s.outputs if o.tokens]
    assert all(o.accepted_drafts <= o.proposed_drafts for o in outs)
    assert all(len(o.tokens) <= o.accepted_drafts + 1 for o in outs)
    assert all(set(s.timing) == {"draft", "tree", "verify", "commit"} for s in steps)
    # Speculation actually happened: some step committed more than one token.
    assert max(len(o.tokens) for o in outs) > 1
    assert backend.info.spec_algorithm in ("CHAIN", "DDTREE") and backend.info.num_draft_tokens > 0
    assert backend.spec.drafter._states == {} if hasattr(backend.spec.drafter, "_states") else True


@pytest.mark.parametrize("verify", ["chain", "tree"])
def test_self_drafting_accepts_every_draft(smollm, reference, verify):
    backend = _backend(smollm, 16, drafter="model:smollm2", verify=verify, num_draft_tokens=4, budget=8)
    tokens, steps = _run(backend, PROMPTS[:2], GREEDY)
    assert tokens == reference[:2]
    for s in steps:
        for o in s.outputs:
            if o.tokens and o.proposed_drafts:
                depth = len(o.accepted_per_position)
                assert o.accepted_per_position == [True] * depth
                assert o.accepted_drafts == depth


def test_sampled_speculation_runs_and_is_reproducible(smollm):
    params = SamplingParams(max_tokens=16, temperature=0.8, top_p=0.95, seed=7, ignore_eos=True)
    spec = {"drafter": "layers:8", "verify": "chain", "num_draft_tokens": 3}
    first, _ = _run(_backend(smollm, 16, **spec), PROMPTS[:2], params)
    again, _ = _run(_backend(smollm, 16, **spec), PROMPTS[:2], params)
    assert first == again and all(len(t) == 16 for t in first)
    tree, _ = _run(_backend(smollm, 16, drafter="ngram", verify="tree", num_draft_tokens=3, budget=6),
                   PROMPTS[:2], params)
    assert all(len(t) == 16 for t in tree)


def test_release_mid_step_frees_target_and_draft_caches(smollm):
    backend = _backend(smollm, 16, drafter="model:smollm2", verify="chain", num_draft_tokens=3)
    draft_kv = backend.spec.drafter.lm.kv
    for rid in ("keep", "gone"):
        backend.prefill_sync(rid, backend.tokenize(PROMPTS[0]), GREEDY)
    backend._locked(backend.step_sync, ["keep", "gone"])
    assert "gone" in backend.kv.seqs and "gone" in draft_kv.seqs
    # A client disconnects while a step holds the engine lock: the release is deferred to the
    # end of that step (this is the real code path serve takes), then frees both caches.
    with backend._lock:
        backend.release("gone")
        assert "gone" in backend.kv.seqs
    backend._locked(backend.step_sync, ["keep"])
    assert "gone" not in backend.kv.seqs and "gone" not in draft_kv.seqs
    assert "keep" in draft_kv.seqs
    backend.release("keep")
    assert backend.kv.free_pages == backend.kv.num_pages
    assert draft_kv.free_pages == draft_kv.num_pages
