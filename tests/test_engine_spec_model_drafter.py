"""The draft-model drafter (a tiny random Llama, fp32, CPU): drafting for itself it
proposes exactly the model's greedy continuation, its cache reconciles after partial accepts
(same drafts as a fresh drafter), the draft window bounds what it sees, release frees pages."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specscope.engine.kv_cache import KVCache  # noqa: E402
from specscope.engine.loader import TINY_CONFIG, random_model  # noqa: E402
from specscope.engine.speculative.drafter import DraftRequest  # noqa: E402
from specscope.engine.speculative.model_drafter import EngineLM, ModelDrafter, window_base  # noqa: E402

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def smollm():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the shared cores are oversubscribed; see test_engine_spec_lossless
    yield random_model(TINY_CONFIG, device="cpu", dtype=torch.float32, seed=2)
    torch.set_num_threads(threads)


def _lm(loaded, pages=64, page_size=16):
    cfg = loaded.config
    kv = KVCache(
        num_layers=cfg.num_layers,
        num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        num_pages=pages,
        page_size=page_size,
    )
    return EngineLM(loaded.model, kv, max_rows=512)


def _greedy(lm: EngineLM, prompt: list[int], n: int) -> list[int]:
    logits = lm.extend([("ref", prompt, 0)])[0][-1]
    out = []
    for _ in range(n):
        tok = int(logits.argmax())
        out.append(tok)
        logits = lm.extend([("ref", [tok], len(prompt) + len(out) - 1)])[0][-1]
    lm.release("ref")
    return out


def test_self_drafting_proposes_greedy_continuation_and_reconciles(smollm):
    prompt_a = [12, 40, 7, 7, 91, 3, 55, 12, 40, 7, 60, 2, 18, 33]
    prompt_b = [4, 86, 23, 9]
    lm = _lm(smollm)
    drafter = ModelDrafter(lm, top_k=4)
    drafts = drafter.propose([DraftRequest("a", prompt_a, 5), DraftRequest("b", prompt_b, 3)])
    assert drafts[0].chain == _greedy(_lm(smollm), prompt_a, 5)
    assert drafts[1].chain == _greedy(_lm(smollm), prompt_b, 3)
    assert drafts[0].topk_tokens.shape == (5, 4) and drafts[0].q_probs is None
    assert np.all(np.diff(drafts[0].topk_logprobs, axis=1) <= 0)
    assert drafts[0].topk_tokens[:, 0].tolist() == drafts[0].chain

    # Accept 2 drafts, then a bonus token the drafter did not predict: the cache must drop the
    # rejected rows and give what a fresh drafter gives for the same committed tokens.
    committed = [*prompt_a, *drafts[0].chain[:2], 11]
    again = drafter.propose([DraftRequest("a", committed, 4)])[0]
    fresh = ModelDrafter(_lm(smollm), top_k=4).propose([DraftRequest("a", committed, 4)])[0]
    assert again.chain == fresh.chain
    np.testing.assert_allclose(again.topk_logprobs, fresh.topk_logprobs, atol=1e-4)

    used = lm.kv.num_pages - lm.kv.free_pages
    assert used > 0
    drafter.release("a")
    drafter.release("b")
    drafter.release("b")  # idempotent
    assert lm.kv.free_pages == lm.kv.num_pages


def test_sampled_drafts_carry_q(smollm):
    drafter = ModelDrafter(_lm(smollm), top_k=3)
    prompt = [30, 1, 77, 45]
    d = drafter.propose([DraftRequest("s", prompt, 3, temperature=0.8, seed=1)])[0]
    assert d.q_probs.shape == (3, smollm.config.vocab_size)
    np.testing.assert_allclose(d.q_probs.sum(axis=1), 1.0, atol=1e-6)
    assert all(d.q_probs[i, t] > 0 for i, t in enumerate(d.chain))


def test_window_base_bounds_the_view():
    assert window_base(100, None) == 0 and window_base(100, 200) == 0
    for n in range(9, 200):
        base = window_base(n, 8)
        assert 0 <= n - base <= 8 and n - base >= 8 - 2  # stride W/4 = 2
