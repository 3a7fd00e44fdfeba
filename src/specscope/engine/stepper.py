"""What one engine step does with the running requests: the `Stepper` interface and the plain
(one token per request) stepper. The speculative one lives in engine/speculative/stepper.py.

A stepper gets the target `Runner` and the live requests, and returns what each request
commits; it never sees the backend. The backend then applies EOS, stop strings and limits
(`EngineBackend.accept_tokens`), so both steppers finish requests the same way.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from specscope.engine.request import Request
from specscope.engine.runner import Runner, Work, extend
from specscope.engine.sampling import sample_rows


@dataclass
class Proposal:
    """What one request commits from one step (accepted drafts + the bonus token)."""

    tokens: list[int]
    accepted_drafts: int = 0
    proposed_drafts: int = 0
    accepted_per_position: list[bool] | None = None


@dataclass
class StepResult:
    proposals: dict[str, Proposal]
    timing: dict[str, float] = field(default_factory=dict)  # seconds per phase of the step


@dataclass
class SpeculationInfo:
    """How a stepper describes itself in BackendInfo (SGLang's conventions)."""

    algorithm: str
    num_draft_tokens: int  # tokens per verify forward, root included
    extra: dict[str, Any] = field(default_factory=dict)


class Stepper(Protocol):
    # Graph node budget / KV rows one step needs per request beyond its context (1: decode).
    max_nodes: int
    # Target layers whose outputs the stepper reads (a drafter conditioned on the target's
    # hidden states); () for none. Non-empty means every target forward, prefill included,
    # goes through `Runner.forward_hidden`.
    target_taps: tuple[int, ...]

    def observe_prefill(self, request_id: str, hidden: Any) -> None:
        """The tapped hidden states [n, len(taps) * hidden] of the request's next n prompt
        positions, as prefill computes them (only called when `target_taps` is non-empty)."""
        ...

    def speculation(self) -> SpeculationInfo | None: ...

    def step(self, runner: Runner, live: Sequence[Request], max_context: int) -> StepResult: ...

    def release(self, request_id: str) -> None: ...


class PlainStepper:
    """Every live request feeds its pending token; one batched forward; greedy rows take the
    argmax, sampled rows one batched draw."""

    max_nodes = 1
    target_taps: tuple[int, ...] = ()

    def speculation(self) -> SpeculationInfo | None:
        return None

    def observe_prefill(self, request_id: str, hidden: Any) -> None:
        return None

    def step(self, runner: Runner, live: Sequence[Request], max_context: int) -> StepResult:
        t0 = time.perf_counter()
        logits = extend(runner, [Work(r.seq, [r.tokens[-1]]) for r in live])
        assert logits is not None
        greedy = logits.argmax()  # synchronises: the step's GPU work is done after this
        t1 = time.perf_counter()
        tokens = [row[0] for row in greedy]
        sampled = [i for i, r in enumerate(live) if r.params.temperature > 0]
        if sampled:  # every sampled request's token from one batched draw (engine/sampling.py)
            picks = sample_rows(
                logits.tensor[sampled, 0],
                [live[i].params.temperature for i in sampled],
                [live[i].params.top_p for i in sampled],
                [live[i].generator for i in sampled],
            )
            for i, tok in zip(sampled, picks, strict=True):
                tokens[i] = tok
        proposals = {r.request_id: Proposal([tok]) for r, tok in zip(live, tokens, strict=True)}
        return StepResult(proposals, {"verify": t1 - t0, "commit": time.perf_counter() - t1})

    def release(self, request_id: str) -> None:
        return None
