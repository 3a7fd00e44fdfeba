"""transformers' LlamaForCausalLM holding OUR loaded tensors: the anchor that the correctness
test compares logits against and the benches time beside our engine (same weights, same device).

transformers is imported lazily: the engine itself never needs it.
"""

from __future__ import annotations

from typing import Any

from specscope.engine.loader import LoadedModel


def hf_llama_from(lm: LoadedModel, num_layers: int | None = None) -> Any:
    """The same model in transformers (optionally only its first `num_layers` layers: an
    early-exit draft for assisted generation). Shares our tensors (no copy on the same dtype)."""
    import transformers

    c = lm.config
    n_layers = c.num_layers if num_layers is None else num_layers
    hc = transformers.LlamaConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_hidden_layers=n_layers,
        num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_kv_heads,
        head_dim=c.head_dim,
        rms_norm_eps=c.rms_norm_eps,
        rope_theta=c.rope_theta,
        max_position_embeddings=c.max_position_embeddings,
        tie_word_embeddings=c.tie_word_embeddings,
    )
    hf = transformers.LlamaForCausalLM(hc)
    state = {
        k if k == "lm_head.weight" else f"model.{k}": v
        for k, v in lm.model.state_dict().items()
        if not k.startswith("layers.") or int(k.split(".")[1]) < n_layers
    }
    missing, _ = hf.load_state_dict(state, strict=False, assign=True)
    missing = [m for m in missing if "rotary" not in m and m != "lm_head.weight"]
    if missing:
        raise ValueError(f"transformers model lacks weights: {missing[:5]}")
    hf.tie_weights()
    return hf.to(device=lm.device, dtype=lm.dtype).eval()
