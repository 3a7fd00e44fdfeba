"""What an experiment needs from a server: prompts of an exact length and one streamed request.

Experiments are written against this small protocol, not against the probe's client, so they
stay testable with any sender; `specscope.experiments.probe_target` adapts the real probe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from specscope.trace import RequestSpec, RequestTrace


@dataclass(frozen=True)
class Prompt:
    """A prompt and the workload category it was drawn from (copied to RequestSpec.category)."""

    text: str | list[int] | list[dict[str, Any]]
    category: str | None = None


@runtime_checkable
class Target(Protocol):
    async def prompt(self, n_tokens: int, seed: int = 0) -> str | list[int] | Prompt:
        """A prompt of exactly `n_tokens` tokens in the server's tokenizer. Called once per
        request: a target whose prompts must not share a cacheable prefix makes each call's
        prompt unique, with the content chosen by `seed`."""
        ...

    async def send(self, spec: RequestSpec, index: int = 0, slot: int = 0) -> RequestTrace:
        """Send one request and return its trace (`index`, `slot`: its number in the run and
        its concurrency slot). Failures are recorded in the trace's `error`, never raised."""
        ...

    def describe(self) -> dict[str, Any]:
        """Endpoint, flavor, api, model, max_context (None when unknown), server info."""
        ...
