"""The Backend protocol: what `serve` needs from a thing that decodes (the twin or the engine).

Kept small on purpose: add a request (prefill), advance every running request by one verify
step together (continuous batching: the step's time depends on the batch), and release.
`serve` owns HTTP, streaming, logs and metrics; a backend owns tokens and time.

It lives beside the layers, not in `serve/`, so that the implementations (`twin`, `engine`)
and the front (`serve`) depend on it and never on one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


class BackendError(Exception):
    """A request the backend cannot take (e.g. prompt longer than the context, pool exhausted).
    `serve` turns it into an OpenAI-style error body with `status`."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class SamplingParams:
    max_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False
    stop: list[str] = field(default_factory=list)


@dataclass
class BackendInfo:
    model: str
    max_context: int
    # Speculation set-up, for /get_server_info, logs and metrics. num_draft_tokens = 0: no speculation.
    spec_algorithm: str | None = None
    num_draft_tokens: int = 0
    page_size: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepOutput:
    """What one request got from one verify step."""

    request_id: str
    tokens: list[int]  # committed this step: accepted drafts + 1 bonus (>= 1 unless finished early)
    accepted_drafts: int = 0
    proposed_drafts: int = 0
    finished: bool = False
    finish_reason: str | None = None  # "length" | "stop"
    # Per-position acceptance of this step's drafts (True/False per drafted depth), when known.
    accepted_per_position: list[bool] | None = None


@dataclass
class BatchStep:
    """One batched verify step: every running request advanced once."""

    outputs: list[StepOutput]
    step_s: float  # wall time the step took (engine) or was simulated to take (twin)
    # Split of the step's time, seconds: e.g. {"draft": .., "tree": .., "verify": .., "commit": ..}
    timing: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class Backend(Protocol):
    info: BackendInfo

    def tokenize(self, text: str) -> list[int]: ...

    def detokenize(self, ids: list[int]) -> str: ...

    def apply_chat_template(self, messages: list[dict[str, Any]]) -> list[int]: ...

    def eos_token_ids(self) -> set[int]: ...

    async def prefill(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> None:
        """Admit a request. Raises BackendError when it cannot be admitted."""
        ...

    async def step(self, request_ids: list[str]) -> BatchStep:
        """Advance each listed (prefilled, unfinished) request by one verify step."""
        ...

    def release(self, request_id: str) -> None:
        """Free everything the request holds (KV pages, drafter state). Idempotent."""
        ...
