"""The per-token parts of a decoder layer as compiled functions of (activations, weights).

A step of a model this small is launch-bound, so the token-wise parts of a layer (RMSNorm, the
fused QKV projection, RoPE, residuals, the fused gate/up MLP) are `torch.compile`d functions
that take the layer's weights as arguments: one compiled set serves every layer, and, with
dynamic shapes, every batch. The graph runner (graph_runner.py) captures them in its CUDA graphs;
fresh prompts' prefill (prefill.py) calls them directly. No Triton import here: the functions run
uncompiled on any device (the CPU tests do).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specscope.engine.model import Transformer

_COMPILED: dict[tuple, tuple] = {}
# Compiled variants one process may need of each function (Dynamo counts them per code object,
# so every architecture shares the count): per dtype, one token or many, the captured step's
# strided inputs or a prefill's contiguous ones, inference tensors or not. Dynamo's default of 8
# was reached by bench/engine_lossless.py's fp32 then bf16 runs once prefill used these
# functions (H200, 2026-12-05), and with fullgraph=True that is an error, not a slow path.
RECOMPILE_LIMIT = 64


def allow_variants() -> None:
    """Raise Dynamo's recompile limit to RECOMPILE_LIMIT (never lower it)."""
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, RECOMPILE_LIMIT)


def _tokenwise_functions(h: int, kvh: int, d: int, eps: float, gemv: bool) -> tuple:
    """(first, middle, last): the token-wise parts of a step for one architecture shape, as
    functions of (activations, weights), so one compiled set serves every layer.
    first: embedding, RoPE angles, layer 0's norm + QKV; middle: a layer's output projection and
    MLP, then the next layer's norm + QKV; last: the final layer's rest, norm, LM head, argmax."""

    def rms(x, w):
        hx = x.float()
        hx = hx * torch.rsqrt(hx.pow(2).mean(-1, keepdim=True) + eps)
        return w * hx.to(x.dtype)

    def linear(a, w):
        # One token (batch-1 decode): a multiply-reduce that Inductor fuses with the norm /
        # activation feeding it, instead of a cuBLAS launch whose fixed latency dominates at
        # M = 1. Several tokens: the matrix product (tensor cores, weights read once).
        if gemv and a.shape[0] == 1:
            return (a[:, None, :].float() * w[None].float()).sum(-1).to(a.dtype)
        return a @ w.t()

    def rot(x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    def qkv(x, ln, wqkv, cos, sin):
        # One RoPE pass over q and k together; q, k, v leave as views (the attention
        # kernel takes token strides), so no copy kernels.
        t = x.shape[0]
        y = linear(rms(x, ln), wqkv)
        qk = rot(y[:, : (h + kvh) * d].view(t, h + kvh, d), cos, sin)
        return qk[:, :h], qk[:, h:], y[:, (h + kvh) * d :].view(t, kvh, d)

    def first(tokens, positions, embed, inv_freq, ln, wqkv):
        x = F.embedding(tokens, embed)
        ang = positions.to(torch.float32)[:, None] * inv_freq
        ang = torch.cat([ang, ang], dim=-1)[:, None, :]
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        q, k, v = qkv(x, ln, wqkv, cos, sin)
        return x, cos, sin, q, k, v

    def mlp_block(x, o, wo, ln2, wgu, wd):
        x = x + linear(o.reshape(x.shape[0], -1), wo)
        g, u = linear(rms(x, ln2), wgu).chunk(2, dim=-1)
        return x + linear(F.silu(g) * u, wd)

    def middle(x, o, wo, ln2, wgu, wd, ln_next, wqkv_next, cos, sin):
        x = mlp_block(x, o, wo, ln2, wgu, wd)
        q, k, v = qkv(x, ln_next, wqkv_next, cos, sin)
        return x, q, k, v

    def last(x, o, wo, ln2, wgu, wd, norm, head):
        x = mlp_block(x, o, wo, ln2, wgu, wd)
        logits = linear(rms(x, norm), head).float()
        return logits, logits.argmax(dim=-1)

    return first, middle, last


class TokenwiseLayers:
    """The per-token parts of the model as functions of (activations, weights): compiled once,
    reused by every layer. Arithmetic follows model.py (RMSNorm in float32, scale in the model
    dtype; rotate-half RoPE)."""

    @torch.no_grad()
    def __init__(self, model: Transformer, compile: bool, gemv: bool = True):
        cfg = model.cfg
        self.h, self.kvh, self.d, eps = (
            cfg.num_heads,
            cfg.num_kv_heads,
            cfg.head_dim,
            cfg.rms_norm_eps,
        )
        h, kvh, d = self.h, self.kvh, self.d
        self.embed = model.embed_tokens.weight
        self.inv_freq = model.inv_freq
        self.final_norm = model.norm.weight
        self.head = model.lm_head.weight
        self.layers = []
        for layer in model.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append(
                (
                    layer.input_layernorm.weight,
                    torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).contiguous(),
                    a.o_proj.weight,
                    layer.post_attention_layernorm.weight,
                    torch.cat([m.gate_proj.weight, m.up_proj.weight]).contiguous(),
                    m.down_proj.weight,
                )
            )

        first, middle, last = _tokenwise_functions(h, kvh, d, eps, gemv)
        wrap = (
            (lambda f: torch.compile(f, dynamic=True, fullgraph=True)) if compile else (lambda f: f)
        )
        # One compiled set per architecture shape: a second runner (another bench configuration,
        # another KV layout) reuses the compiled code instead of compiling again.
        key = (h, kvh, d, eps, compile, gemv)
        if compile:
            allow_variants()
        if key not in _COMPILED:
            _COMPILED[key] = (wrap(first), wrap(middle), wrap(last))
        self.first, self.middle, self.last = _COMPILED[key]
