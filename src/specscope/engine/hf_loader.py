"""Load a Hugging Face Llama-family folder: config.json, *.safetensors, tokenizer.json.

Safetensors only (never pickle): a folder with only `pytorch_model.bin` is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from specscope.engine.model import ModelConfig
from specscope.engine.tokenizer import TextCodec, codec_from_hf_folder

SUPPORTED_MODEL_TYPES = ("llama", "mistral")  # same block; mistral's sliding window is ignored


def config_from_hf(raw: dict[str, Any]) -> ModelConfig:
    model_type = raw.get("model_type", "llama")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"unsupported model_type {model_type!r} (supported: {SUPPORTED_MODEL_TYPES})"
        )
    heads = int(raw["num_attention_heads"])
    # transformers >= 5 writes "rope_parameters" (theta + scaling); older configs "rope_scaling".
    rope = raw.get("rope_parameters") or {}
    scaling = raw.get("rope_scaling") or (
        rope if rope.get("rope_type", "default") != "default" else None
    )
    hidden = int(raw["hidden_size"])
    return ModelConfig(
        vocab_size=int(raw["vocab_size"]),
        hidden_size=hidden,
        intermediate_size=int(raw["intermediate_size"]),
        num_layers=int(raw["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or hidden // heads),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
        rope_theta=float(raw.get("rope_theta") or rope.get("rope_theta") or 10000.0),
        rope_scaling=scaling,
        max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
    )


def load_hf_folder(folder: Path, with_weights: bool = True):
    """(config, weights or None, codec) from a Hugging Face model folder."""
    from safetensors.torch import load_file

    raw = json.loads((folder / "config.json").read_text())
    cfg = config_from_hf(raw)
    weights = None
    if with_weights:
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(
                f"{folder}: no *.safetensors file (pickle checkpoints are refused)"
            )
        weights = {}
        for f in files:
            for name, t in load_file(str(f)).items():
                weights[name.removeprefix("model.")] = t.float()
    codec: TextCodec = codec_from_hf_folder(folder, raw)
    return cfg, weights, codec


def torch_dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
