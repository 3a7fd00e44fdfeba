"""One running request of the engine, as the backend and its stepper see it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from specscope.backend import SamplingParams
from specscope.engine.kv_cache import SeqKV


@dataclass
class Request:
    request_id: str
    params: SamplingParams
    seq: SeqKV
    tokens: list[int]  # prompt + generated; tokens[-1] is pending (its KV is not written yet)
    num_prompt: int
    generator: torch.Generator
    finished: bool = False
    finish_reason: str | None = None
    state: dict[str, Any] = field(default_factory=dict)  # the stepper's per-request state

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.num_prompt :]

    @property
    def num_generated(self) -> int:
        """len(generated) without copying the list (read per request per step)."""
        return len(self.tokens) - self.num_prompt

    def room(self, max_context: int) -> int:
        """Tokens this request may still emit (max_tokens and the context limit)."""
        return min(self.params.max_tokens - self.num_generated, max_context - len(self.tokens))
