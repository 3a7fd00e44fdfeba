"""Fresh prompts' prefill through the compiled token-wise functions (engine/cuda/prefill.py)
writes the K/V the eager forward writes, for a group of prompts of different lengths in one
forward (right-padded, causal), every layer; decoding after it gives the same tokens.

On the CPU the functions run uncompiled (the same Python Inductor compiles on CUDA), so this
checks the arithmetic and the layout (heads, padding, the skipped last layer), not the kernels;
the CUDA path is checked by `bench/engine_lossless.py --device cuda`."""

from __future__ import annotations

import pytest
import torch

from specscope.engine.cuda.prefill import is_fresh, pack_fresh, prefill_fresh, warm_up
from specscope.engine.cuda.tokenwise import TokenwiseLayers
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import TINY_CONFIG, random_model
from specscope.engine.runner import EagerRunner, Work, extend

pytestmark = pytest.mark.engine

TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}
PROMPTS = [[(5 * i + 11 * j) % 90 + 3 for j in range(n)] for i, n in enumerate((17, 9, 30, 1))]


def _pool(model, dtype) -> KVCache:
    return KVCache.for_model(
        model.cfg, pool_tokens=512, page_size=4, policy="scattered", dtype=dtype
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fresh_prefill_writes_the_eager_forwards_kv(dtype):
    model = random_model(TINY_CONFIG, dtype=dtype, seed=5).model
    eager_kv, fresh_kv = _pool(model, dtype), _pool(model, dtype)
    eager_seqs = [eager_kv.admit(f"r{i}", 64) for i in range(len(PROMPTS))]
    fresh_seqs = [fresh_kv.admit(f"r{i}", 64) for i in range(len(PROMPTS))]
    extend(
        EagerRunner(model, eager_kv),
        [Work(s, p) for s, p in zip(eager_seqs, PROMPTS, strict=True)],
        False,
    )
    work = [Work(s, p) for s, p in zip(fresh_seqs, PROMPTS, strict=True)]
    assert is_fresh(work)
    slots, batch = pack_fresh(work, fresh_kv)
    assert batch.causal  # SDPA's is_causal form: no mask built
    prefill_fresh(TokenwiseLayers(model, compile=False, gemv=False), fresh_kv, batch)
    for w in work:
        fresh_kv.commit(w.seq, len(w.tokens))
    for e, f, s in zip(eager_seqs, fresh_seqs, slots, strict=True):
        got_rows, want_rows = fresh_kv.context_slots(f), eager_kv.context_slots(e)
        assert list(got_rows) == list(s)
        for layer in range(model.cfg.num_layers):
            for got_pool, want_pool in ((fresh_kv.k, eager_kv.k), (fresh_kv.v, eager_kv.v)):
                got, want = got_pool[layer][got_rows], want_pool[layer][want_rows]
                scale = want.abs().max().item()
                assert (got - want).abs().max().item() <= TOL[dtype] * scale, (layer, e)


def test_a_context_or_a_tree_mask_is_not_fresh():
    model = random_model(TINY_CONFIG, seed=5).model
    kv = _pool(model, torch.float32)
    seq = kv.admit("a", 64)
    assert not is_fresh([Work(seq, [1, 2], mask=[[False, False], [True, False]])])
    assert not is_fresh([Work(seq, [1, 2], positions=[4, 5])])
    extend(EagerRunner(model, kv), [Work(seq, [3, 4, 5])], False)
    assert not is_fresh([Work(seq, [6])])


def test_the_warm_up_leaves_the_pool_as_it_found_it():
    model = random_model(TINY_CONFIG, seed=5).model
    kv = _pool(model, torch.float32)
    warm_up(TokenwiseLayers(model, compile=False, gemv=False), kv)
    assert kv.free_pages == kv.num_pages
    seq = kv.admit("__prefill_warmup_0", 8)  # its names are free again
    assert seq.context_len == 0
