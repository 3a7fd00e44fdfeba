"""The DFlash block step's parts that stand in for one torch call each: the top-k over the
draft slots' logits, the packed top-k's round trip, the grouped-matmul attention (CPU, fp32
and bf16), and a drafter on the grouped attention drafting as one on SDPA's."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from specscope.engine.loader import TINY_CONFIG, random_model  # noqa: E402
from specscope.engine.speculative.dflash import DFlashDrafter  # noqa: E402
from specscope.engine.speculative.dflash_block import (  # noqa: E402
    block_attention,
    pack_topk,
    top_logprobs,
    unpack_topk,
)
from specscope.engine.speculative.dflash_model import grouped_attention  # noqa: E402
from specscope.engine.speculative.drafter import DraftRequest  # noqa: E402
from support.engine import tiny_dflash  # noqa: E402

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_top_k_over_the_logits_is_the_top_k_of_the_log_probs(dtype):
    """Taken over the logits in their own dtype, less the log-sum-exp: the same log-probs as
    top-k over log_softmax in float32, largest first, and each picked id's own log-prob (bf16
    logits tie often: any of a tie may win); k past the vocabulary takes all of it."""
    g = torch.Generator().manual_seed(7)
    logits = (torch.randn(15, 5000, generator=g) * 4).to(dtype)
    got, ids = top_logprobs(logits, 8)
    logp = torch.log_softmax(logits.float(), dim=-1)
    assert got.dtype == torch.float32 and ids.shape == (15, 8)
    torch.testing.assert_close(got, torch.topk(logp, 8, dim=-1).values, atol=1e-5, rtol=0)
    torch.testing.assert_close(logp.gather(1, ids), got, atol=1e-5, rtol=0)
    assert bool((got[:, :-1] >= got[:, 1:]).all())
    assert top_logprobs(logits[:, :5], 8)[1].shape == (15, 5)


def test_packed_top_k_comes_back_bit_for_bit():
    """Ids and float32 log-probs through one int64 tensor (one copy to the host): the same
    ids, the same floats to the bit (negative ones, -inf and tiny ones included)."""
    lp = torch.tensor([[-0.0, -1e-30, -3.25, float("-inf")], [-7.5, -88.0, -1e-3, -2.0]])
    ids = torch.tensor([[0, 49151, 7, 2**40], [3, 1, 4, 1]])
    packed = pack_topk(lp, ids)
    assert packed.dtype == torch.int64 and packed.shape == (2, 8)
    got_lp, got_ids = unpack_topk(packed.numpy())
    assert got_lp.dtype == np.float64 and got_ids.dtype == np.int64
    np.testing.assert_array_equal(got_ids, ids.numpy())
    np.testing.assert_array_equal(got_lp, lp.double().numpy())
    assert np.signbit(got_lp[0, 0])


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_grouped_attention_is_sdpas_grouped_query_attention(masked, dtype, tol):
    """9 query heads over 3 key heads, 16 queries over 300 context rows + the block; the
    mask hides each request's rows past its own length (two requests, 120 and 300)."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 9, 16, 64, generator=g).to(dtype)
    keys, values = (torch.randn(2, 3, 316, 64, generator=g).to(dtype) for _ in range(2))
    mask = None
    if masked:
        seen = torch.arange(316) < torch.tensor([120, 300])[:, None]
        seen[:, 300:] = True  # the block itself
        mask = seen[:, None, None, :].expand(-1, 1, 16, -1)
    want = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
    got = grouped_attention(q, keys, values, mask)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=0)


def test_a_drafter_on_grouped_attention_drafts_as_on_sdpa():
    """fp32: the same chains and top-k ids, log-probs within float error; an unknown attention
    is refused when the drafter is built, not at its first step; none named, the device's."""
    target = random_model(TINY_CONFIG, device="cpu", dtype=torch.float32, seed=3)
    model = tiny_dflash(target.config)
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(40, model.fc.in_features, generator=g)
    tokens = torch.randint(0, TINY_CONFIG.vocab_size, (41,), generator=g).tolist()
    drafts = {}
    for attention in ("sdpa", "grouped"):
        d = DFlashDrafter(model, target.model, top_k=3, path="static", attention=attention)
        d.observe("a", hidden[:30])
        out = [d.propose([DraftRequest("a", tokens[:31], 5)])[0]]
        d.observe("a", hidden, [30, 33, 35])  # a verify's path among other nodes' rows
        out.append(d.propose([DraftRequest("a", tokens[:34], 5)])[0])
        drafts[attention] = out
    for got, want in zip(drafts["grouped"], drafts["sdpa"], strict=True):
        assert got.sequences == want.sequences
        assert (got.topk_tokens == want.topk_tokens).all()
        assert abs(got.topk_logprobs - want.topk_logprobs).max() < 1e-4
    with pytest.raises(ValueError, match="attention must be one of"):
        DFlashDrafter(model, target.model, attention="flash")
    # Unsaid, the device's: grouped where it was measured faster (CUDA), SDPA on a CPU
    assert DFlashDrafter(model, target.model).attention == "sdpa"
    assert block_attention(torch.device("cuda")) == "grouped"
