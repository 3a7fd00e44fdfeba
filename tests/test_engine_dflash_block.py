"""The DFlash block step's kernels-to-be: the two-stage top-k over the draft slots' logits and
the grouped-matmul attention, each against the one-call torch form it replaces (CPU, fp32
and bf16), and a drafter on the grouped attention drafting as one on SDPA's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from specscope.engine.loader import TINY_CONFIG, random_model  # noqa: E402
from specscope.engine.speculative import dflash_model  # noqa: E402
from specscope.engine.speculative.dflash import DFlashDrafter  # noqa: E402
from specscope.engine.speculative.dflash_block import top_logprobs  # noqa: E402
from specscope.engine.speculative.dflash_model import grouped_attention  # noqa: E402
from specscope.engine.speculative.drafter import DraftRequest  # noqa: E402

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("vocab", [700, 4096, 5000, 49152])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_two_stage_top_k_picks_the_whole_rows_top_k(vocab, dtype):
    """Below one slice, a multiple of it, padded to one (5,000 = 4 x 1,024 + 904), the
    shipped vocabulary's 48 slices: the same log-probs as top-k over log_softmax, largest
    first, and each picked id's own log-prob (bf16 logits tie often: any of a tie may win)."""
    g = torch.Generator().manual_seed(vocab)
    logits = (torch.randn(15, vocab, generator=g) * 4).to(dtype)
    got, ids = top_logprobs(logits, 8, chunk=1024)
    logp = torch.log_softmax(logits.float(), dim=-1)
    want = torch.topk(logp, 8, dim=-1).values
    assert got.dtype == torch.float32 and ids.shape == (15, 8)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(logp.gather(1, ids), got, atol=1e-5, rtol=0)
    assert bool((got[:, :-1] >= got[:, 1:]).all())
    assert all(len(set(row.tolist())) == 8 for row in ids)


def test_a_k_wider_than_a_slice_takes_the_whole_row():
    logits = torch.randn(3, 300)
    got, ids = top_logprobs(logits, 40, chunk=32)
    want = torch.topk(torch.log_softmax(logits, dim=-1), 40, dim=-1)
    torch.testing.assert_close(got, want.values, atol=1e-6, rtol=0)
    assert torch.equal(ids, want.indices)


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
    is refused when the drafter is built, not at its first step."""
    target = random_model(TINY_CONFIG, device="cpu", dtype=torch.float32, seed=3)
    cfg = dflash_model.DFlashConfig.for_target(
        "tiny", target.config, num_layers=2, block_size=6, num_taps=2
    )
    model = dflash_model.DFlashDraftModel(cfg)
    model.init_weights(seed=1, embed_std=1.0)
    for p in model.parameters():
        if p.dim() == 2:
            p.data.mul_(10)
    model.eval()
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
