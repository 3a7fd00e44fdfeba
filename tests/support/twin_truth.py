"""The twin's truth over the steps a probe timed: what `probe --workers` is held to (issue #37)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from specscope.trace.model import RequestTrace


def timed_truth(
    traces: Sequence[RequestTrace], truth_of: Callable[[str], dict[str, Any] | None]
) -> tuple[float, float]:
    """(commit length, step time) of the twin's own steps behind the client's: every step after
    those the first token-bearing read held (the client does not time those), pooled over the
    requests (tokens / steps, seconds / steps), with the step time the client can see (wall_s:
    from the request's previous step's end to this one's)."""
    tokens = steps = 0
    wall = 0.0
    for trace in traces:
        truth = truth_of(trace.request_id or "")
        assert truth is not None, f"no truth for request {trace.index} ({trace.request_id})"
        commits = [st["commit_len"] for st in truth["steps"]]
        first = next(c.t_ns for c in trace.chunks if c.n_tokens)
        head = sum(c.n_tokens for c in trace.chunks if c.t_ns == first)
        k = acc = 0
        while acc < head:
            acc += commits[k]
            k += 1
        assert acc == head, (trace.index, head, commits[:k])
        tokens += sum(commits[k:])
        steps += len(commits) - k
        wall += sum(st["wall_s"] for st in truth["steps"][k:])
    return tokens / steps, wall / steps
