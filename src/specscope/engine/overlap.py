"""Overlapped decode steps: the host's work on step n runs while the device computes step n + 1.

Why: a synchronous step is launch, wait for the device, then the host's per-request Python
(reading the tokens, EOS, stop strings, limits, the outputs), and only then the next launch,
so the device idles for the host's share of every step: on the H200 at batch 256, 2.2 of the
step's 4.3 ms (`bench/engine_step_python.py`, 2026-12-05), and the served step carries more.
SGLang's overlap scheduler and vLLM's async scheduling run that work while the device
computes the next step; this is the same for plain greedy decoding, where step n + 1's input
is step n's argmax, which never has to visit the host first:

- `launch` stages step n + 1 for the running requests, feeding each request that was in
  step n its token straight from step n's device output (`Runner.forward(tokens_on_device=)`),
  starts the forward, and queues a non-blocking copy of the new argmax to the host;
- `finish` waits for that copy (the device is by then on the step after) and commits the
  tokens as a synchronous step would (`EngineBackend.accept_tokens`).

What it costs: a request that ends on EOS or a stop string at step n was already launched in
step n + 1; that token is computed and dropped, and its KV row is freed with the request (the
reservation holds it: such a request stopped short of max_tokens). A request's limit
(max_tokens, the context) is known in advance, so it is never launched past it. Each stream's
tokens reach the server one step later than a synchronous step would hand them over.

Only plain greedy decoding overlaps: a drafter needs the committed tokens on the host to draft
from, and sampling reads the logits on the host (a batch holding a sampled request steps
synchronously). `serve/step_thread.StepLoop` drives launch and finish.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specscope.engine.request import Request


@dataclass
class Launched:
    """One overlapped step in flight: its requests in order, its argmax on the device (a copy
    of its own: the graph's output buffer is the next replay's), and the same tokens on their
    way to the host (`ready` marks the copy's end on CUDA; None on the CPU, where it is done)."""

    requests: list[Request]
    tokens_device: torch.Tensor | None  # long [b]; None when nothing was launched
    tokens_host: torch.Tensor | None
    ready: torch.cuda.Event | None
    launch_s: float  # the host's time in `launch`

    def in_flight(self) -> dict[int, int]:
        """Each launched request's row, by object identity (an id may be reused by a later
        request once this one is released; the object still held here cannot)."""
        return {id(req): row for row, req in enumerate(self.requests)}


def feed_tokens(
    live: Sequence[Request], previous: Launched | None, rows: dict[int, int], device: torch.device
) -> tuple[list[int], torch.Tensor | None]:
    """The tokens a step feeds: on the host, each request's pending token (a placeholder 0 for
    those coming from `previous`), and on the device the whole column, or None when no request
    was in `previous` (the host tokens are then all there is). A request in `previous` (`rows`:
    `previous.in_flight()`, built once by the caller; empty without `previous`) feeds its row of
    `previous`'s argmax, gathered on the device."""
    source = [rows.get(id(req), -1) for req in live]
    host = [req.tokens[-1] if row < 0 else 0 for req, row in zip(live, source, strict=True)]
    if all(row < 0 for row in source):
        return host, None
    assert previous is not None and previous.tokens_device is not None
    if source == list(range(len(live))):  # the same requests in the same order (steady state)
        return host, previous.tokens_device[: len(live)]
    cuda = device.type == "cuda"
    packed = torch.tensor([source, host], dtype=torch.long, pin_memory=cuda)
    packed = packed.to(device, non_blocking=cuda)
    picked = previous.tokens_device[packed[0].clamp(min=0)]
    return host, torch.where(packed[0] >= 0, picked, packed[1])


def to_host(tokens_device: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
    """A copy of the step's tokens on its way to the host, and the event that marks it done
    (pinned memory and a non-blocking copy on CUDA: the host does not wait here)."""
    if tokens_device.device.type != "cuda":
        return tokens_device, None
    host = torch.empty(tokens_device.shape, dtype=tokens_device.dtype, pin_memory=True)
    host.copy_(tokens_device, non_blocking=True)
    ready = torch.cuda.Event()
    ready.record()
    return host, ready
