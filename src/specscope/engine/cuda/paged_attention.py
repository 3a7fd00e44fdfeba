"""Paged attention for decode and tree verification: a Triton split-K (flash-decoding) kernel
that reads K/V through the page table itself, from fixed-capacity device buffers.

Why a kernel of our own rather than SDPA over gathered K/V (the eager path) or FlexAttention:
- every input has a fixed shape per batch bucket (page table [rows, max_pages], lengths [B],
  write slots and mask bits [B, Q]), so the step can be captured once as a CUDA graph and
  replayed at any context length: the length is data, not shape;
- the page size and the pages' physical placement stay visible to the kernel (slot =
  page_table[row, pos // page] * page + pos % page), so page-1 scattered and page-16 contiguous
  KV are read the way a serving engine's paged kernel reads them (the fragmentation question);
- the tree mask is one 64-bit word per query (bit i: sees new token i), so decode (Q = 1),
  chains and DDTree verification are one kernel; FlexAttention's block mask would have to be
  rebuilt per step from the same data, outside the graph.
One program per (request, KV head, split) handles the G query heads of its group at once
(GQA: K/V read once per group); split 0 also writes the new tokens' K/V into the pool and
attends to them under the mask bits. A second kernel merges the splits' partial softmaxes.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

SM_TARGET_PROGRAMS = 264  # ~2 programs per multiprocessor on an H100/H200 (132 SMs)
BLOCK_N = 64  # context tokens per inner iteration


@triton.jit
def _attend(q, k, v, visible, m_i, l_i, acc, sm_scale, IEEE: tl.constexpr):
    """One online-softmax update of (m_i, l_i, acc) with keys k / values v where `visible`."""
    qk = tl.dot(q, tl.trans(k), input_precision="ieee") if IEEE else tl.dot(q, tl.trans(k))
    qk = tl.where(visible, qk * sm_scale, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(qk - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    pv = tl.dot(p.to(v.dtype), v, input_precision="ieee") if IEEE else tl.dot(p.to(v.dtype), v)
    acc = acc * alpha[:, None] + pv
    return m_new, l_i, acc


@triton.jit
def _paged_attention_kernel(
    q_ptr,
    k_new_ptr,
    v_new_ptr,
    k_pool_ptr,
    v_pool_ptr,
    table_ptr,
    rows_ptr,
    lens_ptr,
    write_ptr,
    bits_ptr,
    out_ptr,
    part_m_ptr,
    part_l_ptr,
    part_acc_ptr,
    sm_scale,
    max_pages,
    stride_q,
    stride_k,
    stride_v,
    Q_LEN: tl.constexpr,
    G: tl.constexpr,
    KVH: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    IEEE: tl.constexpr,
):
    b = tl.program_id(0)
    hk = tl.program_id(1)
    s = tl.program_id(2)
    offs_m = tl.arange(0, BLOCK_M)  # query row = (new token j, head g of the group)
    j = offs_m // G
    g = offs_m % G
    m_ok = offs_m < Q_LEN * G
    offs_d = tl.arange(0, D)
    tok = (b * Q_LEN + j).to(tl.int64)
    q = tl.load(
        q_ptr + (tok * stride_q + (hk * G + g) * D)[:, None] + offs_d[None, :],
        mask=m_ok[:, None],
        other=0.0,
    )
    out_off = (tok * (KVH * G) + hk * G + g) * D
    ctx = tl.load(lens_ptr + b).to(tl.int32)
    row = tl.load(rows_ptr + b).to(tl.int64)
    per = tl.cdiv(tl.cdiv(ctx, NUM_SPLITS), BLOCK_N) * BLOCK_N
    lo = s * per
    hi = tl.minimum(lo + per, ctx)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    for start in range(lo, hi, BLOCK_N):
        pos = start + offs_n
        ok = pos < hi
        page = tl.load(table_ptr + row * max_pages + pos // PAGE, mask=ok, other=0).to(tl.int64)
        kv_off = ((page * PAGE + pos % PAGE) * KVH + hk) * D
        k = tl.load(k_pool_ptr + kv_off[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0)
        v = tl.load(v_pool_ptr + kv_off[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0)
        m_i, l_i, acc = _attend(q, k, v, ok[None, :], m_i, l_i, acc, sm_scale, IEEE)
    if s == 0:
        # The new tokens: write their K/V into the pool (rows past the context, which no other
        # program of this launch reads) and attend to them under the mask bits.
        offs_q = tl.arange(0, BLOCK_Q)
        q_ok = offs_q < Q_LEN
        new_tok = (b * Q_LEN + offs_q).to(tl.int64)
        k_off = new_tok * stride_k + hk * D
        v_off = new_tok * stride_v + hk * D
        kn = tl.load(k_new_ptr + k_off[:, None] + offs_d[None, :], mask=q_ok[:, None], other=0.0)
        vn = tl.load(v_new_ptr + v_off[:, None] + offs_d[None, :], mask=q_ok[:, None], other=0.0)
        slot = tl.load(write_ptr + b * Q_LEN + offs_q, mask=q_ok, other=0).to(tl.int64)
        pool_off = (slot * KVH + hk) * D
        tl.store(k_pool_ptr + pool_off[:, None] + offs_d[None, :], kn, mask=q_ok[:, None])
        tl.store(v_pool_ptr + pool_off[:, None] + offs_d[None, :], vn, mask=q_ok[:, None])
        bits = tl.load(bits_ptr + b * Q_LEN + j, mask=m_ok, other=1)
        seen = ((bits[:, None] >> offs_q[None, :].to(tl.int64)) & 1) != 0
        m_i, l_i, acc = _attend(q, kn, vn, seen & q_ok[None, :], m_i, l_i, acc, sm_scale, IEEE)
    if NUM_SPLITS == 1:
        out = acc / l_i[:, None]
        tl.store(
            out_ptr + out_off[:, None] + offs_d[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=m_ok[:, None],
        )
    else:
        part = ((b * KVH + hk) * NUM_SPLITS + s) * BLOCK_M + offs_m
        tl.store(part_m_ptr + part, m_i)
        tl.store(part_l_ptr + part, l_i)
        tl.store(part_acc_ptr + part[:, None] * D + offs_d[None, :], acc)


@triton.jit
def _combine_kernel(
    part_m_ptr,
    part_l_ptr,
    part_acc_ptr,
    out_ptr,
    Q_LEN: tl.constexpr,
    G: tl.constexpr,
    KVH: tl.constexpr,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
):
    """Merge the splits' partial softmaxes of one query row (one program per row: the splits
    are loaded at once, not one after another)."""
    b = tl.program_id(0)
    hk = tl.program_id(1)
    m = tl.program_id(2)  # query row < Q_LEN * G
    offs_s = tl.arange(0, NUM_SPLITS)
    offs_d = tl.arange(0, D)
    part = ((b * KVH + hk) * NUM_SPLITS + offs_s) * BLOCK_M + m
    m_s = tl.load(part_m_ptr + part)
    l_s = tl.load(part_l_ptr + part)
    a_s = tl.load(part_acc_ptr + part[:, None] * D + offs_d[None, :])
    # Splits with no keys hold m = -inf; split 0 (the new tokens) never does.
    m_max = tl.max(m_s, 0)
    w = tl.where(m_s == float("-inf"), 0.0, tl.exp(m_s - m_max))
    out = tl.sum(a_s * w[:, None], 0) / tl.sum(l_s * w, 0)
    j = m // G
    g = m % G
    out_off = ((b * Q_LEN + j).to(tl.int64) * (KVH * G) + hk * G + g) * D
    tl.store(out_ptr + out_off + offs_d, out.to(out_ptr.dtype.element_ty))


def num_splits_for(batch: int, kv_heads: int, max_splits: int = 16) -> int:
    """Splits of the context per (request, KV head) so that a launch fills the chip: a batch-1
    decode over 8192 tokens must not run on 3 programs."""
    want = math.ceil(SM_TARGET_PROGRAMS / max(1, batch * kv_heads))
    return 1 if want <= 1 else min(max_splits, triton.next_power_of_2(want))


def _token_strided(t: torch.Tensor) -> torch.Tensor:
    """The layout the kernel addresses: token (b * Q + j) at one stride, heads x head_dim dense;
    anything else (a layout Inductor chose) is copied once."""
    if t.stride(3) == 1 and t.stride(2) == t.shape[3] and t.stride(0) == t.shape[1] * t.stride(1):
        return t
    return t.contiguous()


def paged_attention(
    q: torch.Tensor,  # [B, Q, H, D]; heads and head dim dense, tokens at any stride
    k_new: torch.Tensor,  # [B, Q, KVH, D], likewise (views into a fused QKV output are fine)
    v_new: torch.Tensor,
    k_pool: torch.Tensor,  # [slots + 1, KVH, D] (one layer of KVCache.k)
    v_pool: torch.Tensor,
    block_table: torch.Tensor,  # int32 [rows, max_pages]
    seq_rows: torch.Tensor,  # [B] row of block_table per request (0: padding)
    ctx_lens: torch.Tensor,  # [B] committed tokens per request (the keys before the new ones)
    write_slots: torch.Tensor,  # long [B, Q] pool slot of each new token (pad slot: padding)
    mask_bits: torch.Tensor,  # long [B, Q] bit i of row j: new token j sees new token i
    page_size: int,
    num_splits: int,
) -> torch.Tensor:
    """Attention of each new token over its request's committed context (through the page
    table) and the new tokens its mask bits name; also writes the new K/V into the pool.
    Returns [B, Q, H, D] in q's dtype."""
    b, q_len, h, d = q.shape
    kvh = k_new.shape[2]
    g = h // kvh
    if q_len > 63:
        raise ValueError("paged_attention: at most 63 new tokens per request (one mask word)")
    block_m = max(16, triton.next_power_of_2(q_len * g))
    block_q = max(16, triton.next_power_of_2(q_len))
    q, k_new, v_new = (_token_strided(t) for t in (q, k_new, v_new))
    out = torch.empty(b, q_len, h, d, dtype=q.dtype, device=q.device)
    if num_splits > 1:
        part_m = torch.empty(b * kvh * num_splits * block_m, dtype=torch.float32, device=q.device)
        part_l = torch.empty_like(part_m)
        part_acc = torch.empty(part_m.numel() * d, dtype=torch.float32, device=q.device)
    else:
        part_m = part_l = part_acc = out  # unused
    ieee = q.dtype == torch.float32  # fp32 runs must not silently drop to tf32
    _paged_attention_kernel[(b, kvh, num_splits)](
        q,
        k_new,
        v_new,
        k_pool,
        v_pool,
        block_table,
        seq_rows,
        ctx_lens,
        write_slots,
        mask_bits,
        out,
        part_m,
        part_l,
        part_acc,
        1.0 / math.sqrt(d),
        block_table.shape[1],
        q.stride(1),
        k_new.stride(1),
        v_new.stride(1),
        Q_LEN=q_len,
        G=g,
        KVH=kvh,
        D=d,
        PAGE=page_size,
        BLOCK_M=block_m,
        BLOCK_N=BLOCK_N,
        BLOCK_Q=block_q,
        NUM_SPLITS=num_splits,
        IEEE=ieee,
    )
    if num_splits > 1:
        _combine_kernel[(b, kvh, q_len * g)](
            part_m,
            part_l,
            part_acc,
            out,
            Q_LEN=q_len,
            G=g,
            KVH=kvh,
            D=d,
            BLOCK_M=block_m,
            NUM_SPLITS=num_splits,
        )
    return out


def causal_bits(q_len: int) -> list[int]:
    """Mask words of a causal run of q_len new tokens: token j sees tokens 0..j."""
    return [(1 << (j + 1)) - 1 for j in range(q_len)]


def mask_bits(mask) -> list[int]:
    """Mask words from a bool [q, q] mask (mask[j, i]: j sees i); the diagonal always set."""
    q = len(mask)
    return [sum(1 << i for i in range(q) if mask[j][i] or i == j) for j in range(q)]
