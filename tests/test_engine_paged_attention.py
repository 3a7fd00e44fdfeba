"""The CUDA fast path's paged attention kernel against SDPA over gathered K/V (runs where a CUDA
device is present: the GPU check; bench/engine_lossless.py covers the whole engine there).

Random queries/keys, page size 4, scattered pages, contexts 0 / 7 / 70, a random tree mask
among 5 (or 33: a 32-node tree and its root) new tokens, split-K 1 and 4, q/k/v as token-strided views of one fused tensor; the
kernel must also have written the new tokens' K/V into their slots."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device (Triton kernel)", allow_module_level=True)
pytest.importorskip("triton")

import torch.nn.functional as F  # noqa: E402

from specscope.engine.cuda.paged_attention import mask_bits, paged_attention  # noqa: E402

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("q", [5, 33])  # 33: a tree budget of 32 plus its root
@pytest.mark.parametrize("splits", [1, 4])
def test_kernel_equals_sdpa_over_the_gathered_context(splits, q):
    torch.manual_seed(0)
    rng = random.Random(0)
    kvh, g, d, page, b = 3, 3, 64, 4, 3
    lens = [0, 7, 70]
    kp = torch.randn(64 * page + 1, kvh, d, device="cuda")
    vp = torch.randn_like(kp)
    free = list(range(64))
    rng.shuffle(free)
    pages = [[free.pop() for _ in range((n + q + page - 1) // page)] for n in lens]
    table = torch.zeros(b + 1, 40, dtype=torch.int32, device="cuda")
    for i, p in enumerate(pages):
        table[i + 1, : len(p)] = torch.tensor(p, dtype=torch.int32)

    def slot(i, r):
        return pages[i][r // page] * page + r % page

    fused = torch.randn(b, q, kvh * g + 2 * kvh, d, device="cuda")
    qh, kn, vn = (
        fused[:, :, : kvh * g],
        fused[:, :, kvh * g : kvh * g + kvh],
        fused[:, :, kvh * g + kvh :],
    )
    masks = [(torch.rand(q, q) < 0.5).tril() for _ in range(b)]
    bits = torch.tensor([mask_bits(m.tolist()) for m in masks], device="cuda")
    write = torch.tensor(
        [[slot(i, lens[i] + j) for j in range(q)] for i in range(b)], device="cuda"
    )
    k_pool, v_pool = kp.clone(), vp.clone()
    out = paged_attention(
        qh,
        kn,
        vn,
        k_pool,
        v_pool,
        table,
        torch.arange(1, b + 1, device="cuda"),
        torch.tensor(lens, device="cuda"),
        write,
        bits,
        page,
        splits,
    )
    for i in range(b):
        ctx = [slot(i, r) for r in range(lens[i])]
        keys, values = torch.cat([kp[ctx], kn[i]]), torch.cat([vp[ctx], vn[i]])
        seen = torch.cat(
            [torch.ones(q, lens[i], dtype=torch.bool), masks[i] | torch.eye(q, dtype=torch.bool)], 1
        )
        ref = F.scaled_dot_product_attention(
            qh[i].transpose(0, 1),
            keys.transpose(0, 1),
            values.transpose(0, 1),
            attn_mask=seen[None].cuda(),
            enable_gqa=True,
        ).transpose(0, 1)
        torch.testing.assert_close(out[i], ref, rtol=1e-4, atol=1e-4)
    assert torch.equal(k_pool[write.flatten()], kn.reshape(-1, kvh, d))
    assert torch.equal(v_pool[write.flatten()], vn.reshape(-1, kvh, d))
