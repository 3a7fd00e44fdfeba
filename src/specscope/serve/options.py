"""How a server behaves beyond its backend: streaming, logging, batching limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specscope.serve.faults import HostFaults


@dataclass
class ServeOptions:
    """None means "take it from the backend" (the twin's scenario carries streaming defaults)."""

    stream_interval: int | None = None  # SGLang --stream-interval: emit when tokens % N == 0
    per_token_events: bool | None = None  # llama.cpp-like: one SSE event per token
    decode_log_interval: int = 40  # SGLang --decode-log-interval: "Decode batch" every N steps
    log_file: Path | None = None
    log_to_stderr: bool = True
    step_log: bool = True  # the per-step "DDTREE metrics" line (speculative backends only)
    max_batch: int | None = None  # running requests stepped together; the rest wait
    served_model_name: str | None = None
    faults: HostFaults = field(default_factory=HostFaults)  # --fault (docs/faults.md)
