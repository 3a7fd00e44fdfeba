"""The eager forward with its host work cut (issue #38) against the path it replaced.

The reference is the replaced path's arithmetic, one request alone: context K/V gathered by
slot beside the new tokens', an explicit bool mask (context all seen, new tokens causal or by the
tree mask, diagonal included) and RoPE through `rotate_half`. The forward under test packs the
batch in one host buffer, takes SDPA's is_causal form for fresh prompts, builds the mask on the
device otherwise, and folds RoPE's sign into its sin table; its logits, every layer's hidden
states and the K/V it writes must equal the reference's, and a tree step must still be masked.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import TINY_CONFIG, random_model
from specscope.engine.model import ForwardBatch, NewTokens, Transformer, rotate_half
from specscope.engine.runner import EagerRunner, Work, extend

pytestmark = pytest.mark.engine

# Relative to the reference's largest entry (a random model's logits are ~1e-2). On the CPU
# both dtypes come out within 1e-7 (bf16 equal bit for bit): the tolerance is for other kernels.
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-3}


@pytest.fixture(scope="module", params=[torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def model(request) -> Transformer:
    return random_model(TINY_CONFIG, dtype=request.param, seed=3).model


def _runner(model: Transformer, page_size: int = 4) -> EagerRunner:
    kv = KVCache.for_model(
        model.cfg,
        pool_tokens=1024,
        page_size=page_size,
        policy="scattered",
        dtype=model.embed_tokens.weight.dtype,
    )
    return EagerRunner(model, kv)


@torch.inference_mode()
def _reference(model: Transformer, k_pool, v_pool, work: Work, context: list[int]):
    """The replaced path for one request: (logits [q, vocab], hidden [q, layers * hidden],
    new K per layer [layers, q, kv_heads, head_dim])."""
    cfg, n = model.cfg, len(work.tokens)
    x = model.embed_tokens(torch.tensor([work.tokens]))
    angles = torch.tensor([work.resolved_positions()], dtype=torch.float32)[..., None]
    angles = angles * model.inv_freq
    angles = torch.cat([angles, angles], dim=-1)[:, :, None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    tri = torch.ones(n, n, dtype=torch.bool).tril()
    new_ok = tri if work.mask is None else torch.as_tensor(work.mask) | torch.eye(n, dtype=bool)
    seen = torch.cat([torch.ones(n, len(context), dtype=torch.bool), new_ok], dim=1)
    hidden, new_k = [], []
    for i, layer in enumerate(model.layers):
        a = layer.self_attn
        h = layer.input_layernorm(x)
        q = a.q_proj(h).view(1, n, cfg.num_heads, cfg.head_dim)
        k = a.k_proj(h).view(1, n, cfg.num_kv_heads, cfg.head_dim)
        v = a.v_proj(h).view(1, n, cfg.num_kv_heads, cfg.head_dim)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        keys = torch.cat([k_pool[i][context][None], k], dim=1).transpose(1, 2)
        values = torch.cat([v_pool[i][context][None], v], dim=1).transpose(1, 2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), keys, values, attn_mask=seen, enable_gqa=True
        )
        x = x + a.o_proj(out.transpose(1, 2).reshape(1, n, -1))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
        hidden.append(x[0])
        new_k.append(k[0])
    logits = model.lm_head(model.norm(x)).float()[0]
    return logits, torch.cat(hidden, dim=-1), torch.stack(new_k)


def _check_against_reference(runner: EagerRunner, work: list[Work]) -> None:
    """One forward of `work` (all layers tapped) equals the reference for every request."""
    kv, model = runner.kv, runner.model
    contexts = [kv.context_slots(w.seq).tolist() for w in work]
    k_before, v_before = kv.k.clone(), kv.v.clone()
    taps = tuple(range(model.cfg.num_layers))
    slots, logits, hidden = runner.forward_hidden(work, taps)
    tol = TOL[model.embed_tokens.weight.dtype]

    def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
        scale = float(expected.abs().max())
        torch.testing.assert_close(actual, expected, rtol=tol, atol=tol * scale)

    for r, (w, ctx) in enumerate(zip(work, contexts, strict=True)):
        ref_logits, ref_hidden, ref_k = _reference(model, k_before, v_before, w, ctx)
        q = len(w.tokens)
        close(logits.tensor[r, :q], ref_logits)
        close(hidden[r], ref_hidden)
        close(kv.k[:, slots[r]], ref_k)
    for w in work:
        kv.commit(w.seq, len(w.tokens))


def _prompt(n: int, salt: int) -> list[int]:
    return [(7 * k + salt) % 90 + 3 for k in range(n)]


def test_fresh_single_prompt(model):
    runner = _runner(model)
    _check_against_reference(runner, [Work(runner.kv.admit("a", 64), _prompt(41, 1))])


def test_chunked_prompt_with_cached_context(model):
    runner = _runner(model)
    seq = runner.kv.admit("a", 64)
    extend(runner, [Work(seq, _prompt(23, 2))], want_logits=False)
    _check_against_reference(runner, [Work(seq, _prompt(17, 5))])


def test_several_prompts_of_different_lengths_in_one_forward(model):
    runner = _runner(model)
    lengths = [40, 17, 5, 1, 29]
    work = [Work(runner.kv.admit(f"r{i}", 64), _prompt(n, i)) for i, n in enumerate(lengths)]
    _check_against_reference(runner, work)


def test_tree_verify_step_beside_a_decode_step(model):
    """A tree step (root, two siblings, a grandchild) over 12 context tokens next to a plain
    decode over 5: still masked, and the siblings never see each other."""
    runner = _runner(model, page_size=1)
    tree_seq, plain_seq = runner.kv.admit("t", 64), runner.kv.admit("p", 64)
    extend(runner, [Work(tree_seq, _prompt(12, 3)), Work(plain_seq, _prompt(5, 4))], False)
    mask = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=bool)
    tree = Work(tree_seq, [11, 13, 17, 19], positions=[12, 13, 13, 14], mask=mask)
    _check_against_reference(runner, [tree, Work(plain_seq, [23])])


def test_pack_picks_plain_causal_only_without_context_and_tree_masks():
    def pack(*items: tuple[int, int, object]) -> ForwardBatch:
        news = [
            NewTokens([1] * q, list(range(c, c + q)), list(range(q)), list(range(100, 100 + c)), m)
            for q, c, m in items
        ]
        return ForwardBatch.pack(news, "cpu", pad_slot=999)

    fresh = pack((5, 0, None), (3, 0, None))
    assert fresh.causal and fresh.attn_mask is None and fresh.read_slots is None
    decode = pack((1, 7, None), (1, 7, None))  # one token each over equal contexts: all seen
    assert not decode.causal and decode.attn_mask is None
    assert decode.read_slots.tolist()[0] == [*range(100, 107), 0]
    chunk = pack((3, 4, None), (1, 2, None))
    assert not chunk.causal and chunk.attn_mask is not None
    # request 1's context padding (2 of 4 columns) is not seen; new tokens causally
    assert chunk.attn_mask[1, 0, 0].tolist() == [True, True, False, False, True, False, False]
    assert chunk.attn_mask[0, 0, 1].tolist() == [True] * 4 + [True, True, False]
    tree = pack((3, 0, np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=bool)))
    assert not tree.causal and tree.attn_mask[0, 0].tolist() == [
        [True, False, False],
        [True, True, False],
        [True, False, True],
    ]
