"""The engine's faults (`specscope serve --backend engine --fault NAME[=VALUE]`, docs/faults.md):
the drafter's (speculative/faults.py) and the runner's, parsed and checked in one place so that a
bad value is one clear line before any model is loaded.

- `graph-off-above=B`: decode and verify steps whose batch holds more than B requests run the
  eager forward instead of the captured CUDA graphs (`EagerAbove`). The graphs are still captured
  for every bucket; the dispatch leaves them above B, as a server does whose graph capture sizes
  stop below its running batch (vLLM's `cudagraph_capture_sizes`, or its speculative path that
  once fell back to eager above a batch). On CPU there are no graphs: the fault is accepted and
  changes nothing, and the server says so in its info (factory.state_faults).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specscope.engine.speculative.faults import (
    FAULT_HELP,
    check_drafter_faults,
    fault_value,
    positive_int,
)

if TYPE_CHECKING:
    from specscope.engine.runner import Runner, Work

RUNNER_FAULT_HELP = {
    "graph-off-above": "steps whose batch exceeds B run eager, off the captured CUDA graphs "
    "(=B; no effect on CPU)",
}
# Every engine fault by name, what --help and the unknown-fault error list.
ENGINE_FAULT_HELP = {**RUNNER_FAULT_HELP, **FAULT_HELP}


@dataclass(frozen=True)
class EngineFaults:
    """The engine's faults from `--fault` specs: the runner's, and the drafter's specs as given."""

    graph_off_above: int | None = None
    drafter: tuple[str, ...] = ()


def parse_engine_faults(specs: Sequence[str]) -> EngineFaults:
    """Split and check `NAME[=VALUE]` specs; ValueError (one line) on an unknown name or a bad
    value, so the CLI can refuse before loading a model."""
    graph, drafter = None, []
    for spec in specs:
        name, value = fault_value(spec)
        if name == "graph-off-above":
            graph = positive_int(name, value, "a batch size")
        elif name in FAULT_HELP:
            drafter.append(spec)
        else:
            raise ValueError(
                f"unknown engine fault {name!r} (known: {', '.join(ENGINE_FAULT_HELP)})"
            )
    check_drafter_faults(drafter)
    return EngineFaults(graph, tuple(drafter))


class EagerAbove:
    """A runner that replays `fast`'s captured graphs for batches of up to `max_graph_batch`
    requests and runs `eager` (the same model over the same KV pool) above: the
    `graph-off-above=B` fault. Only the dispatch differs from `fast`; both paths read and write
    one pool, as the graph runner's own fallbacks (long prefill chunks) already do."""

    def __init__(self, fast: Runner, eager: Runner, max_graph_batch: int):
        self.fast, self.eager, self.max_graph_batch = fast, eager, max_graph_batch
        self.kv, self.device = fast.kv, fast.device

    def _runner(self, work: Sequence[Work]) -> Runner:
        return self.eager if len(work) > self.max_graph_batch else self.fast

    def forward(
        self, work: Sequence[Work], want_logits: bool = True, tokens_on_device: Any = None
    ) -> Any:
        return self._runner(work).forward(work, want_logits, tokens_on_device)

    def forward_hidden(
        self, work: Sequence[Work], taps: tuple[int, ...], want_logits: bool = True
    ) -> Any:
        return self._runner(work).forward_hidden(work, taps, want_logits)

    def __getattr__(self, attr: str) -> Any:  # warmup() and the like: the fast runner's
        return getattr(self.fast, attr)
