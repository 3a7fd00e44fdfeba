"""A Llama-architecture decoder that reads and writes a paged KV cache.

One forward call advances a *batch of requests*, each by SEVERAL new tokens with EXPLICIT
positions. That single shape covers every caller:

- prefill: request r feeds its prompt (q_r = prompt length, positions 0..q_r-1, no context);
- decode: every request feeds 1 token at position len(context);
- chain verification: a request feeds its last token + k drafted tokens (causal among them);
- tree verification: a request feeds the tree's nodes with depth-based positions and a custom
  mask among the new tokens (`new_mask[r, j, i]` = new token j may attend to new token i).

API (see `ForwardBatch` and `Transformer.forward`)::

    batch = ForwardBatch.pack([
        NewTokens(token_ids=[...], positions=[...], write_slots=[q slots],
                  context_slots=[c slots], mask=None or bool [q, q]),
        ...                                   # one NewTokens per request, all on the host
    ], device=..., pad_slot=kv.pad_slot)
    logits = model(batch, kv)                 # float32 [B, Q_max, vocab]; row r, column j is
                                              # request r's j-th new token (j < q_r; rest padding)

Semantics, per request: every new token attends to all `context_slots` (the request's already
committed KV, in position order — normally `KVCache.context_slots(seq)`), and to new token i iff
`mask[j, i]` (default: causal, i <= j; the diagonal is always allowed). Their K/V are written into
`write_slots` of the pool (slots from `KVCache.alloc_rows`); nothing else in the pool changes,
so a rejected draft costs nothing but its slot. Positions only drive RoPE.

Host work per forward (issue #38: an eager prefill on the H200 was host-bound): `pack` sends the
ids, positions and slots to the device in one copy, and attention takes one of three forms
decided there from lengths alone — plain causal SDPA (`is_causal`, no mask: fresh prompts, the
flash kernel on CUDA), no mask (one new token each over equal contexts), or a mask built once
per forward on the device. RoPE's tables and the mask's additive form are made once per forward,
not per layer, and nothing in a forward reads a device value back to the host.

Parameter names follow Hugging Face's LlamaForCausalLM without the "model." prefix, so a
safetensors checkpoint loads by stripping it and tests can copy our tensors into transformers.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    # Hugging Face style: None, {"rope_type": "linear", "factor": f} or {"rope_type": "llama3", ...}
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """Inverse frequencies of RoPE, with the model's theta and (linear or llama3) scaling —
    the same arithmetic as transformers' rope initialisers, so logits match it."""
    dim = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling = cfg.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind in ("default", None):
        pass
    elif kind == "linear":
        inv_freq = inv_freq / float(scaling["factor"])
    elif kind == "llama3":
        factor = float(scaling["factor"])
        low = float(scaling.get("low_freq_factor", 1.0))
        high = float(scaling.get("high_freq_factor", 4.0))
        old_ctx = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old_ctx / low, inv_freq / factor, inv_freq)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old_ctx / high) & ~(wavelen > old_ctx / low)
        inv_freq = torch.where(medium, smoothed, scaled)
    else:
        raise ValueError(f"unsupported rope scaling {kind!r} (supported: linear, llama3)")
    return inv_freq.float()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in float32 like the reference, then scale in the working dtype. h * h is
        # pow(h, 2)'s own arithmetic (bit for bit) without its two extra dispatcher calls.
        h = x.float()
        h = h * torch.rsqrt((h * h).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


# Slots and masks come from the host: a list, a numpy array or a CPU tensor.
HostArray = Sequence[int] | np.ndarray | torch.Tensor


@dataclass
class NewTokens:
    """One request's part of a forward: its new tokens and where their KV lives (host data)."""

    token_ids: list[int]
    positions: list[int]
    write_slots: HostArray  # long [q]: pool slots that receive the new tokens' K/V
    context_slots: HostArray  # long [c]: pool slots of the committed context, position order
    # bool [q, q] on the host: mask[j, i] = new j sees new i; None = causal
    mask: np.ndarray | torch.Tensor | None = None


@dataclass
class ForwardBatch:
    """Device tensors for one batched forward (B requests, Q_max new tokens, C_max context)."""

    token_ids: torch.Tensor  # long [B, Q]
    positions: torch.Tensor  # long [B, Q]
    write_slots: torch.Tensor  # long [B * Q], flat as index_copy_ takes it; padding -> pad slot
    read_slots: torch.Tensor | None  # long [B, C + Q]: context then write slots; None if C = 0
    attn_mask: torch.Tensor | None  # bool [B, 1, Q, C + Q]; None: `causal`, or all visible
    causal: bool  # no context, no tree mask: SDPA's is_causal (flash on CUDA), no mask at all
    num_new: list[int]

    @staticmethod
    def pack(items: list[NewTokens], device: torch.device | str, pad_slot: int) -> ForwardBatch:
        """Pad the requests into one batch: ids, positions and slots cross to the device in one
        copy of one host buffer, and the attention form is decided from lengths alone (no
        device value is read back): plain causal, all visible, or a mask built on the device."""
        device = torch.device(device)
        b, q_max = len(items), max(len(it.token_ids) for it in items)
        ctx = [np.asarray(it.context_slots, dtype=np.int64) for it in items]
        c_max = max(c.size for c in ctx)
        # pinned from the start on CUDA (filled in place, no copy into pinned memory after)
        host_t = torch.full(
            (b * (3 * q_max + c_max),), pad_slot, dtype=torch.long, pin_memory=device.type == "cuda"
        )
        host = host_t.numpy()
        per_token = host[: 3 * b * q_max].reshape(3, b, q_max)  # ids, positions, write slots
        per_token[:2] = 0
        context_host = host[3 * b * q_max :].reshape(b, c_max)
        for r, (it, c) in enumerate(zip(items, ctx, strict=True)):
            q = len(it.token_ids)
            if len(it.positions) != q or len(it.write_slots) != q:
                raise ValueError("token_ids, positions and write_slots must have the same length")
            per_token[0, r, :q] = it.token_ids
            per_token[1, r, :q] = it.positions
            per_token[2, r, :q] = np.asarray(it.write_slots, dtype=np.int64)
            context_host[r, : c.size] = c
        dev = host_t.to(device, non_blocking=device.type == "cuda")
        ids, pos, write = dev[: 3 * b * q_max].view(3, b, q_max).unbind(0)
        context = dev[3 * b * q_max :].view(b, c_max)
        num_new = [len(it.token_ids) for it in items]
        masks = [it.mask for it in items]
        causal = c_max == 0 and all(m is None for m in masks)
        # One new token each over equal contexts (e.g. batch-1 decode): every entry is seen.
        visible = q_max == 1 and all(c.size == c_max for c in ctx)
        mask = None if causal or visible else _attention_mask(context, pad_slot, masks, num_new)
        return ForwardBatch(
            token_ids=ids,
            positions=pos,
            write_slots=write.reshape(-1),
            read_slots=torch.cat([context, write], dim=1) if c_max else None,
            attn_mask=mask,
            causal=causal,
            num_new=num_new,
        )


def host_to_device(host: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host array on the device. On CUDA from pinned memory without blocking: a blocking copy
    synchronises the stream, so the host would wait for all the GPU work queued before it."""
    t = torch.from_numpy(host)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _attention_mask(
    context: torch.Tensor, pad_slot: int, masks: list[Any], num_new: list[int]
) -> torch.Tensor:
    """bool [B, 1, Q, C + Q] on the device: a context column is seen where its slot is real
    (padding holds the pad slot), new columns causally or by the request's tree mask. Made from
    the slots already on the device; only tree masks cross from the host."""
    b, c_max = context.shape
    q_max = max(num_new)
    seen_ctx = (context != pad_slot)[:, None, :].expand(b, q_max, c_max)
    if all(m is None for m in masks):
        causal = torch.ones(q_max, q_max, dtype=torch.bool, device=context.device).tril_()
        seen_new = causal.expand(b, q_max, q_max)
    else:
        seen_new = host_to_device(_tree_masks(masks, num_new, q_max), context.device)
    return torch.cat([seen_ctx, seen_new], dim=2)[:, None]


def _tree_masks(masks: list[Any], num_new: list[int], q_max: int) -> np.ndarray:
    """bool [B, Q, Q] on the host: each request's tree mask (causal when it has none) with the
    diagonal; padded rows see only themselves, so softmax never meets an empty row."""
    out = np.broadcast_to(np.eye(q_max, dtype=bool), (len(masks), q_max, q_max)).copy()
    for r, (m, q) in enumerate(zip(masks, num_new, strict=True)):
        out[r, :q, :q] |= np.tri(q, dtype=bool) if m is None else np.asarray(m, dtype=bool)
    return out


def _attention_bias(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """The bool mask as SDPA's additive bias (0 seen, -inf not), once per forward: handed the
    bool mask, SDPA makes this same tensor again in every layer."""
    if mask is None:
        return None
    bias = torch.full(mask.shape, float("-inf"), dtype=dtype, device=mask.device)
    return bias.masked_fill_(mask, 0.0)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """RoPE: x * cos + rotate_half(x) * sin, as x * cos + (x's halves swapped) * [-sin, sin]:
    the same products (negation is exact) in one flip instead of chunk, neg and cat."""
    swapped = x.unflatten(-1, (2, -1)).flip(-2).flatten(-2)
    return x * cos + swapped * sin_signed


def sdpa_backends(device: torch.device):
    """On CUDA, SDPA without cuDNN: cuDNN builds an execution plan for every new KV length
    (~40 ms each on an H200), and prefill chunks and eager decode change the length every call."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    )


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        h, kv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, h * d, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, kv * d, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, cfg.hidden_size, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
        bias: torch.Tensor | None,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
    ) -> torch.Tensor:
        b, q, _ = x.shape
        h, kvh, d = self.cfg.num_heads, self.cfg.num_kv_heads, self.cfg.head_dim
        xq = _rotate(self.q_proj(x).view(b, q, h, d), *rope)
        xk = _rotate(self.k_proj(x).view(b, q, kvh, d), *rope)
        xv = self.v_proj(x).view(b, q, kvh, d)
        k_pool.index_copy_(0, batch.write_slots, xk.view(-1, kvh, d))
        v_pool.index_copy_(0, batch.write_slots, xv.view(-1, kvh, d))
        if batch.read_slots is None:  # no context: the keys are the new tokens' own
            keys, values = xk, xv
        else:  # context and new tokens (just written) through the page table, in one gather:
            # attention never depends on where the pages physically lie
            keys, values = k_pool[batch.read_slots], v_pool[batch.read_slots]
        out = F.scaled_dot_product_attention(
            xq.transpose(1, 2),
            keys.transpose(1, 2),
            values.transpose(1, 2),
            attn_mask=bias,
            is_causal=batch.causal,
            enable_gqa=True,
        )
        return self.o_proj(out.transpose(1, 2).reshape(b, q, h * d))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, rope, batch, bias, k_pool, v_pool):
        x = x + self.self_attn(self.input_layernorm(x), rope, batch, bias, k_pool, v_pool)
        return x + self.mlp(self.post_attention_layernorm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.register_buffer("inv_freq", rope_inv_freq(cfg), persistent=False)

    @torch.inference_mode()
    def forward(
        self, batch: ForwardBatch, kv: Any, compute_logits: bool = True
    ) -> torch.Tensor | None:
        """Run the new tokens of `batch` against the pool of `kv` (a KVCache: `.k[layer]`,
        `.v[layer]` are [slots, kv_heads, head_dim]). Returns float32 logits [B, Q, vocab],
        or None when `compute_logits` is False (prefill chunks whose logits nobody reads)."""
        return self.forward_taps(batch, kv, (), compute_logits)[0]

    @torch.inference_mode()
    def forward_taps(
        self, batch: ForwardBatch, kv: Any, taps: tuple[int, ...], compute_logits: bool = True
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """`forward`, also returning the outputs of the decoder layers numbered in `taps`
        (0-based), concatenated along features: [B, Q, len(taps) * hidden] in the model's dtype,
        or None when `taps` is empty. What a drafter conditioned on the target's hidden states
        (DFlash) reads from the verify forward: the one narrow door into the layer stack."""
        x = self.embed_tokens(batch.token_ids)
        rope = self._rope(batch.positions, x.dtype)
        bias = _attention_bias(batch.attn_mask, x.dtype)
        tapped: dict[int, torch.Tensor] = {}
        with sdpa_backends(x.device):
            for i, layer in enumerate(self.layers):
                x = layer(x, rope, batch, bias, kv.k[i], kv.v[i])
                if i in taps:
                    tapped[i] = x
        missing = [t for t in taps if t not in tapped]
        if missing:
            raise ValueError(f"tapped layers {missing} outside 0..{len(self.layers) - 1}")
        hidden = torch.cat([tapped[t] for t in taps], dim=-1) if taps else None
        logits = self.lm_head(self.norm(x)).float() if compute_logits else None
        return logits, hidden

    def _rope(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE's cos and sign-folded sin ([-sin, sin], see `_rotate`), [B, Q, 1, D] in the
        model's dtype: made once per forward, shared by every layer."""
        angles = positions.to(torch.float32)[..., None] * self.inv_freq  # [B, Q, D/2]
        cos, sin = angles.cos(), angles.sin()
        cos = torch.cat([cos, cos], dim=-1).to(dtype)
        sin = torch.cat([-sin, sin], dim=-1).to(dtype)
        return cos[:, :, None], sin[:, :, None]
