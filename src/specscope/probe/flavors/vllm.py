"""vLLM: the OpenAI endpoints, with `ignore_eos`, continuous usage stats, and per-request
`metrics.speculative_decoding` on the final usage chunk (`--per-request-spec-decode-metrics`;
`detailed` adds ordered `per_step_accepted` / `per_step_drafted`)."""

from __future__ import annotations

from specscope.probe.flavors.openai import OpenAIFlavor


class VLLMFlavor(OpenAIFlavor):
    name = "vllm"
    tokenize_endpoints = (("/tokenize", "prompt"),)
