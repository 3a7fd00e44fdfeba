"""Fresh prompts' prefill through the captured step's compiled token-wise functions.

Why: the eager forward (model.py) is host-bound on the GPU: one 256-token prompt took 46.6 ms of
CPU for 5.6 ms of device work, 1,150 kernel launches (torch.profiler, H200, 2026-12-05,
`bench/engine_prefill_profile.py --device cuda --random`), and every running stream waits for
each prefill forward: at C = 256 that was 2.0 ms of every served step. The graph runner's
`TokenwiseLayers` (tokenwise.py) already hold a layer's norms, projections, RoPE and MLP as a few fused
kernels (compiled with dynamic shapes), so a prompt's forward is per layer: write K/V, one
causal SDPA (flash on CUDA), one compiled function. The last layer's attention and MLP are
skipped: a prefill without logits only needs every layer's K/V, and the last layer's output
feeds nothing else.

Only fresh prompts take this path (no cached context, no tree mask: each request's tokens see
their own earlier tokens, so SDPA's `is_causal` over right-padded rows is exact for the real
tokens; padding writes the pool's scratch slot). Anything else stays on the eager forward.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from specscope.engine.kv_cache import KVCache
from specscope.engine.model import ForwardBatch, NewTokens, sdpa_backends
from specscope.engine.runner import Work


def is_fresh(work: Sequence[Work]) -> bool:
    """Every request starts from an empty context, causal, at consecutive positions."""
    return all(w.seq.context_len == 0 and w.mask is None and w.positions is None for w in work)


def pack_fresh(work: Sequence[Work], kv: KVCache) -> tuple[list[list[int]], ForwardBatch]:
    """Allocate each request's rows and pack the batch (ids, positions, write slots)."""
    slots, items = [], []
    for w in work:
        s = kv.alloc_rows(w.seq, len(w.tokens))
        slots.append(s)
        items.append(NewTokens(w.tokens, list(range(len(w.tokens))), s, [], None))
    return slots, ForwardBatch.pack(items, kv.device, kv.pad_slot)


@torch.inference_mode()
def prefill_fresh(layers, kv: KVCache, batch: ForwardBatch) -> None:
    """Write every layer's K/V for the batch's tokens (`layers`: the graph runner's
    `TokenwiseLayers`). Nothing is returned: no logits, no hidden states."""
    b, q = batch.token_ids.shape
    h, kvh, d = layers.h, layers.kvh, layers.d
    write = batch.write_slots
    first_ln, first_qkv = layers.layers[0][0], layers.layers[0][1]
    x, cos, sin, qh, k, v = layers.first(
        batch.token_ids.reshape(-1),
        batch.positions.reshape(-1),
        layers.embed,
        layers.inv_freq,
        first_ln,
        first_qkv,
    )
    last = len(layers.layers) - 1
    with sdpa_backends(x.device):
        for i, (_, _, wo, ln2, wgu, wd) in enumerate(layers.layers):
            kv.k[i].index_copy_(0, write, k)
            kv.v[i].index_copy_(0, write, v)
            if i == last:
                break
            o = F.scaled_dot_product_attention(
                qh.view(b, q, h, d).transpose(1, 2),
                k.view(b, q, kvh, d).transpose(1, 2),
                v.view(b, q, kvh, d).transpose(1, 2),
                is_causal=True,
                enable_gqa=True,
            )
            nxt_ln, nxt_qkv = layers.layers[i + 1][0], layers.layers[i + 1][1]
            o = o.transpose(1, 2).reshape(b * q, h, d)
            x, qh, k, v = layers.middle(x, o, wo, ln2, wgu, wd, nxt_ln, nxt_qkv, cos, sin)


def warm_up(layers, kv: KVCache) -> None:
    """One small fresh prefill (two prompts, scratch requests released after), so that the
    compiled functions' prefill variant is built when the server starts, not at its first
    request (Dynamo compiles per input layout: the captured step's inputs are strided)."""
    names = ("__prefill_warmup_0", "__prefill_warmup_1")
    try:
        seqs = [kv.admit(name, 32) for name in names]
        _, batch = pack_fresh([Work(s, [1] * n) for s, n in zip(seqs, (17, 9), strict=True)], kv)
        prefill_fresh(layers, kv, batch)
    finally:
        for name in names:
            kv.release(name)
