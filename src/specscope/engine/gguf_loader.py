"""Load a llama-architecture GGUF: config, dequantized weights (HF names), tokenizer.

GGUF stores Q and K projection rows permuted for llama.cpp's interleaved RoPE; we undo the
permutation exactly as transformers' GGUF loader does (`reverse_permute_weights`) so the weights
work with the rotate-half RoPE of Hugging Face's Llama, which model.py implements.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from specscope.engine.model import ModelConfig
from specscope.engine.tokenizer import TextCodec, tokenizer_from_gguf_fields

_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_TOP_NAMES = {"token_embd": "embed_tokens", "output_norm": "norm", "output": "lm_head"}


def _field(reader: Any, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def reverse_permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Inverse of llama.cpp convert_hf_to_gguf's `permute` for Q/K rows."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def hf_name(gguf_name: str) -> str | None:
    parts = gguf_name.split(".")
    if parts[0] == "blk" and len(parts) == 4 and parts[2] in _LAYER_NAMES:
        return f"layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{parts[3]}"
    if len(parts) == 2 and parts[0] in _TOP_NAMES:
        return f"{_TOP_NAMES[parts[0]]}.{parts[1]}"
    return None  # e.g. rope_freqs: RoPE is recomputed from the config


def read_config(reader: Any) -> ModelConfig:
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"unsupported GGUF architecture {arch!r} (this engine runs llama)")

    def key(name: str, default: Any = None) -> Any:
        return _field(reader, f"llama.{name}", default)

    hidden, heads = int(key("embedding_length")), int(key("attention.head_count"))
    names = {t.name for t in reader.tensors}
    scaling = None
    if key("rope.scaling.type") in ("linear",) and key("rope.scaling.factor"):
        scaling = {"rope_type": "linear", "factor": float(key("rope.scaling.factor"))}
    return ModelConfig(
        vocab_size=int(key("vocab_size", len(_field(reader, "tokenizer.ggml.tokens", [])))),
        hidden_size=hidden,
        intermediate_size=int(key("feed_forward_length")),
        num_layers=int(key("block_count")),
        num_heads=heads,
        num_kv_heads=int(key("attention.head_count_kv", heads)),
        head_dim=int(key("rope.dimension_count", hidden // heads)),
        rms_norm_eps=float(key("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(key("rope.freq_base", 10000.0)),
        rope_scaling=scaling,
        max_position_embeddings=int(key("context_length", 2048)),
        tie_word_embeddings="output.weight" not in names,
    )


def read_weights(reader: Any, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    from gguf.quants import dequantize

    weights: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        name = hf_name(t.name)
        if name is None:
            continue
        # numpy shape is GGUF's reversed, i.e. already PyTorch's [out, in].
        array = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        w = torch.from_numpy(array.copy())
        if name.endswith("q_proj.weight"):
            w = reverse_permute(w, cfg.num_heads)
        elif name.endswith("k_proj.weight"):
            w = reverse_permute(w, cfg.num_kv_heads)
        weights[name] = w
    return weights


def read_codec(reader: Any) -> TextCodec:
    model = _field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(f"unsupported GGUF tokenizer {model!r} (supported: gpt2-style BPE)")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    tok = tokenizer_from_gguf_fields(
        tokens,
        _field(reader, "tokenizer.ggml.merges", []),
        _field(reader, "tokenizer.ggml.token_type", [1] * len(tokens)),
        _field(reader, "tokenizer.ggml.pre", "gpt2"),
    )
    bos = _field(reader, "tokenizer.ggml.bos_token_id")
    eos = _field(reader, "tokenizer.ggml.eos_token_id")
    eot = _field(reader, "tokenizer.ggml.eot_token_id")
    return TextCodec(
        tokenizer=tok,
        chat_template=_field(reader, "tokenizer.chat_template"),
        eos_ids={int(i) for i in (eos, eot) if i is not None},
        bos_token=tokens[bos] if bos is not None else "",
        eos_token=tokens[eos] if eos is not None else "",
        add_bos=bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        bos_id=int(bos) if bos is not None else None,
    )


def load_gguf(path: Path, with_weights: bool = True):
    """(config, weights or None, codec) from a GGUF file."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    cfg = read_config(reader)
    return cfg, (read_weights(reader, cfg) if with_weights else None), read_codec(reader)
