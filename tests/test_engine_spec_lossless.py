"""Speculative decoding in the engine is lossless (tiny random Llama, fp32, CPU).

Greedy output with every drafter and verification mode equals plain greedy output, for several
prompts decoded together and for page sizes 1 and 16 (and the in-place tree KV at page size 1);
a model drafting for itself accepts every draft; sampling with speculation runs and is
reproducible per seed; releasing a request mid-step frees both the target and the draft cache.
Random weights prove the same properties as real ones (the verification rule never looks at
what the tokens mean); the real-weights smoke test is test_engine_model.py's.
"""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")

from specscope.backend import SamplingParams  # noqa: E402
from specscope.engine.loader import TINY_CONFIG  # noqa: E402
from specscope.engine.options import EngineOptions  # noqa: E402
from support.engine import (  # noqa: E402
    GREEDY,
    MAX_TOKENS,
    NGRAM,
    PROMPTS,
    backend_for,
    run_to_end,
    tiny_model,
)

pytestmark = pytest.mark.engine

LAYERS = TINY_CONFIG.num_layers


tiny = pytest.fixture(scope="module", name="tiny")(tiny_model)


@pytest.fixture(scope="module")
def reference(tiny):
    tokens, _ = run_to_end(backend_for(tiny, 16), PROMPTS, GREEDY)
    assert all(len(t) == MAX_TOKENS for t in tokens)
    return tokens


@pytest.mark.parametrize(
    ("spec", "page_size", "policy"),
    [
        ({**NGRAM, "verify": "chain", "num_draft_tokens": 4}, 16, "contiguous"),
        ({**NGRAM, "verify": "chain", "num_draft_tokens": 6, "draft_window": 8}, 1, "scattered"),
        ({**NGRAM, "verify": "tree", "num_draft_tokens": 4, "budget": 8}, 16, "scattered"),
        (
            {**NGRAM, "verify": "tree", "num_draft_tokens": 4, "budget": 8, "tree_kv": "inplace"},
            1,
            "contiguous",
        ),
        ({"drafter": "layers:2", "verify": "chain", "num_draft_tokens": 4}, 16, "contiguous"),
        (
            {"drafter": "layers:2", "verify": "tree", "num_draft_tokens": 4, "budget": 12},
            16,
            "contiguous",
        ),
        (
            {
                "drafter": "layers:2",
                "verify": "tree",
                "num_draft_tokens": 4,
                "budget": 12,
                "tree_kv": "inplace",
            },
            1,
            "scattered",
        ),
        (
            {
                "drafter": "layers:1",
                "verify": "tree",
                "num_draft_tokens": 3,
                "budget": 6,
                "draft_window": 8,
            },
            1,
            "contiguous",
        ),
    ],
    ids=lambda v: v if isinstance(v, str | int) else "-".join(f"{k}={x}" for k, x in v.items()),
)
def test_greedy_speculation_is_lossless(tiny, reference, spec, page_size, policy):
    backend = backend_for(tiny, page_size, policy, **spec)
    tokens, steps = run_to_end(backend, PROMPTS, GREEDY)
    assert tokens == reference
    outs = [o for s in steps for o in s.outputs if o.tokens]
    assert all(o.accepted_drafts <= o.proposed_drafts for o in outs)
    assert all(len(o.tokens) <= o.accepted_drafts + 1 for o in outs)
    assert all(set(s.timing) == {"draft", "tree", "verify", "commit"} for s in steps)
    # Speculation actually happened: some step committed more than one token.
    assert max(len(o.tokens) for o in outs) > 1
    assert backend.info.spec_algorithm in ("CHAIN", "DDTREE") and backend.info.num_draft_tokens > 0
    # Every request's drafter state is gone with its release (the model drafter's KV too).
    drafter = backend.stepper.drafter
    if spec["drafter"] == "ngram":
        assert drafter.name == "ngram"  # stateless: nothing to free
    else:
        assert drafter._states == {} and drafter.lm.kv.seqs == {}


@pytest.mark.parametrize("verify", ["chain", "tree"])
def test_self_drafting_accepts_every_draft(tiny, reference, verify):
    # layers:N with N = every layer: the target drafting for itself.
    backend = backend_for(
        tiny, 16, drafter=f"layers:{LAYERS}", verify=verify, num_draft_tokens=4, budget=8
    )
    tokens, steps = run_to_end(backend, PROMPTS[:2], GREEDY)
    assert tokens == reference[:2]
    checked = 0
    for s in steps:
        for o in s.outputs:
            if o.tokens and o.proposed_drafts:
                depth = len(o.accepted_per_position)
                assert o.accepted_per_position == [True] * depth
                assert o.accepted_drafts == depth
                checked += 1
    assert checked > 0


def test_sampled_speculation_runs_and_is_reproducible(tiny):
    params = SamplingParams(max_tokens=16, temperature=0.8, top_p=0.95, seed=7, ignore_eos=True)
    spec = {"drafter": "layers:2", "verify": "chain", "num_draft_tokens": 3}
    first, _ = run_to_end(backend_for(tiny, 16, **spec), PROMPTS[:2], params)
    again, _ = run_to_end(backend_for(tiny, 16, **spec), PROMPTS[:2], params)
    assert first == again and all(len(t) == 16 for t in first)
    other, _ = run_to_end(
        backend_for(tiny, 16, **spec),
        PROMPTS[:2],
        SamplingParams(max_tokens=16, temperature=0.8, top_p=0.95, seed=8, ignore_eos=True),
    )
    assert other != first
    tree, _ = run_to_end(
        backend_for(tiny, 16, **NGRAM, verify="tree", num_draft_tokens=3, budget=6),
        PROMPTS[:2],
        params,
    )
    assert all(len(t) == 16 for t in tree)


def test_release_mid_step_frees_target_and_draft_caches(tiny):
    backend = backend_for(tiny, 16, drafter="layers:2", verify="chain", num_draft_tokens=3)
    draft_kv = backend.stepper.drafter.lm.kv
    for rid in ("keep", "gone"):
        backend.prefill_sync(rid, PROMPTS[0], GREEDY)
    asyncio.run(backend.step(["keep", "gone"]))
    assert "gone" in backend.kv.seqs and "gone" in draft_kv.seqs
    # A client disconnects while a step holds the engine lock: the release is deferred to the
    # end of that step (this is the real code path serve takes), then frees both caches.
    with backend._lock:
        backend.release("gone")
        assert "gone" in backend.kv.seqs
    asyncio.run(backend.step(["keep"]))
    assert "gone" not in backend.kv.seqs and "gone" not in draft_kv.seqs
    assert "keep" in draft_kv.seqs
    backend.release("keep")
    assert backend.kv.free_pages == backend.kv.num_pages
    assert draft_kv.free_pages == draft_kv.num_pages


def test_unknown_engine_option_is_an_error():
    with pytest.raises(ValueError, match="unknown engine option"):
        EngineOptions.from_flags(drafter="ngram", num_draft_tokenz=4)
    with pytest.raises(ValueError, match="tree_kv"):
        EngineOptions.from_flags(drafter="ngram", tree_kv="sideways")
    assert EngineOptions.from_flags(drafter="none").speculation is None
    assert EngineOptions.from_flags(drafter="ngram", budget=5).speculation.max_nodes == 1 + 4
