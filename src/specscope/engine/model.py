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
        NewTokens(token_ids=[...], positions=[...], write_slots=LongTensor[q],
                  context_slots=LongTensor[c], mask=None or BoolTensor[q, q]),
        ...                                   # one NewTokens per request
    ], device=..., pad_slot=kv.pad_slot)
    logits = model(batch, kv)                 # float32 [B, Q_max, vocab]; row r, column j is
                                              # request r's j-th new token (j < q_r; rest padding)

Semantics, per request: every new token attends to all `context_slots` (the request's already
committed KV, in position order — normally `KVCache.context_slots(seq)`), and to new token i iff
`mask[j, i]` (default: causal, i <= j; the diagonal is always allowed). Their K/V are written into
`write_slots` of the pool (slots from `KVCache.alloc_slots`); nothing else in the pool changes,
so a rejected draft costs nothing but its slot. Positions only drive RoPE.

Parameter names follow Hugging Face's LlamaForCausalLM without the "model." prefix, so a
safetensors checkpoint loads by stripping it and tests can copy our tensors into transformers.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

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
        # Normalise in float32 like the reference, then scale in the working dtype.
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


@dataclass
class NewTokens:
    """One request's part of a forward: its new tokens and where their KV lives."""

    token_ids: list[int]
    positions: list[int]
    write_slots: torch.Tensor  # long [q]: pool slots that receive the new tokens' K/V
    context_slots: torch.Tensor  # long [c]: pool slots of the committed context, position order
    mask: torch.Tensor | None = None  # bool [q, q]: mask[j, i] = new j sees new i; None = causal


@dataclass
class ForwardBatch:
    """Padded tensors for one batched forward (B requests, Q_max new tokens, C_max context)."""

    token_ids: torch.Tensor  # long [B, Q]
    positions: torch.Tensor  # long [B, Q]
    write_slots: torch.Tensor  # long [B, Q]; padding -> pad slot
    context_slots: torch.Tensor  # long [B, C]; padding -> pad slot (masked out)
    attn_mask: torch.Tensor | None  # bool [B, 1, Q, C + Q]; None when every entry is True
    num_new: list[int]

    @staticmethod
    def pack(items: list[NewTokens], device: torch.device | str, pad_slot: int) -> ForwardBatch:
        b = len(items)
        q_max = max(len(it.token_ids) for it in items)
        c_max = max(int(it.context_slots.numel()) for it in items)
        ids = torch.zeros(b, q_max, dtype=torch.long)
        pos = torch.zeros(b, q_max, dtype=torch.long)
        write = torch.full((b, q_max), pad_slot, dtype=torch.long, device=device)
        ctx = torch.full((b, c_max), pad_slot, dtype=torch.long, device=device)
        ctx_ok = torch.zeros(b, c_max, dtype=torch.bool)
        # Padded query rows see only themselves (the diagonal), so softmax never sees an empty row.
        new_ok = torch.eye(q_max, dtype=torch.bool).repeat(b, 1, 1)
        causal = torch.ones(q_max, q_max, dtype=torch.bool).tril()
        for r, it in enumerate(items):
            q, c = len(it.token_ids), int(it.context_slots.numel())
            if len(it.positions) != q or it.write_slots.numel() != q:
                raise ValueError("token_ids, positions and write_slots must have the same length")
            ids[r, :q] = torch.tensor(it.token_ids, dtype=torch.long)
            pos[r, :q] = torch.tensor(it.positions, dtype=torch.long)
            write[r, :q] = it.write_slots
            ctx[r, :c] = it.context_slots
            ctx_ok[r, :c] = True
            m = causal[:q, :q] if it.mask is None else it.mask.to(torch.bool).cpu()
            new_ok[r, :q, :q] = m | torch.eye(q, dtype=torch.bool)
        mask = torch.cat([ctx_ok[:, None, :].expand(b, q_max, c_max), new_ok], dim=2)
        return ForwardBatch(
            token_ids=ids.to(device),
            positions=pos.to(device),
            write_slots=write,
            context_slots=ctx,
            # All-visible (e.g. batch-1 decode): no mask lets SDPA take its fastest kernel.
            attn_mask=None if bool(mask.all()) else mask[:, None].to(device),
            num_new=[len(it.token_ids) for it in items],
        )


def _sdpa_backends(device: torch.device):
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
        cos: torch.Tensor,
        sin: torch.Tensor,
        batch: ForwardBatch,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
    ) -> torch.Tensor:
        b, q, _ = x.shape
        h, kvh, d = self.cfg.num_heads, self.cfg.num_kv_heads, self.cfg.head_dim
        xq = self.q_proj(x).view(b, q, h, d)
        xk = self.k_proj(x).view(b, q, kvh, d)
        xv = self.v_proj(x).view(b, q, kvh, d)
        xq = xq * cos + rotate_half(xq) * sin
        xk = xk * cos + rotate_half(xk) * sin
        # Read the committed context through the page table (slot gather), then append the new
        # tokens' own K/V: attention never depends on where the pages physically lie.
        keys = torch.cat([k_pool[batch.context_slots], xk], dim=1)
        values = torch.cat([v_pool[batch.context_slots], xv], dim=1)
        k_pool.index_copy_(0, batch.write_slots.reshape(-1), xk.reshape(-1, kvh, d))
        v_pool.index_copy_(0, batch.write_slots.reshape(-1), xv.reshape(-1, kvh, d))
        with _sdpa_backends(x.device):
            out = F.scaled_dot_product_attention(
                xq.transpose(1, 2),
                keys.transpose(1, 2),
                values.transpose(1, 2),
                attn_mask=batch.attn_mask,
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

    def forward(self, x, cos, sin, batch, k_pool, v_pool):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, batch, k_pool, v_pool)
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
        angles = batch.positions.to(torch.float32)[..., None] * self.inv_freq  # [B, Q, D/2]
        angles = torch.cat([angles, angles], dim=-1)[:, :, None, :]
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        tapped: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, batch, kv.k[i], kv.v[i])
            if i in taps:
                tapped[i] = x
        missing = [t for t in taps if t not in tapped]
        if missing:
            raise ValueError(f"tapped layers {missing} outside 0..{len(self.layers) - 1}")
        hidden = torch.cat([tapped[t] for t in taps], dim=-1) if taps else None
        logits = self.lm_head(self.norm(x)).float() if compute_logits else None
        return logits, hidden
