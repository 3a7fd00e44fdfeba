"""The twin's truth over the steps a probe timed: what `probe --workers` is held to (issue #37)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from specscope.trace.model import RequestTrace


def _behind_head(trace: RequestTrace, truth: dict[str, Any]) -> int:
    """How many of the twin's steps the first token-bearing read held (the client does not
    time those)."""
    commits = [st["commit_len"] for st in truth["steps"]]
    first = next(c.t_ns for c in trace.chunks if c.n_tokens)
    head = sum(c.n_tokens for c in trace.chunks if c.t_ns == first)
    k = acc = 0
    while acc < head:
        acc += commits[k]
        k += 1
    assert acc == head, (trace.index, head, commits[:k])
    return k


def _timed_steps(
    trace: RequestTrace, truth_of: Callable[[str], dict[str, Any] | None]
) -> tuple[int, list[dict[str, Any]]]:
    """(steps the first read held, the twin's steps after them: the ones the client timed)."""
    truth = truth_of(trace.request_id or "")
    assert truth is not None, f"no truth for request {trace.index} ({trace.request_id})"
    k = _behind_head(trace, truth)
    return k, truth["steps"][k:]


def timed_truth(
    traces: Sequence[RequestTrace], truth_of: Callable[[str], dict[str, Any] | None]
) -> tuple[float, float]:
    """(commit length, step time) of the twin's own steps behind the client's: every step after
    those the first token-bearing read held (the client does not time those), pooled over the
    requests (tokens / steps, seconds / steps), with the step time the client can see (wall_s:
    from the request's previous step's end to this one's)."""
    timed = [st for trace in traces for st in _timed_steps(trace, truth_of)[1]]
    tokens = sum(st["commit_len"] for st in timed)
    wall = sum(st["wall_s"] for st in timed)
    return tokens / len(timed), wall / len(timed)


def truth_rows(
    traces: Sequence[RequestTrace], truth_of: Callable[[str], dict[str, Any] | None]
) -> str:
    """Per request, the twin's timed steps and seconds beside the client's decode window (its
    first to last token-bearing read) and reads: where a step-time check that failed lost its
    seconds (a failure message; the truth is gone with the twin)."""
    rows = ["index steps_behind_head twin_steps twin_s client_window_s client_reads"]
    for trace in traces:
        k, timed = _timed_steps(trace, truth_of)
        stamps = [c.t_ns for c in trace.chunks if c.n_tokens]
        window = (stamps[-1] - stamps[0]) / 1e9
        twin_s = sum(st["wall_s"] for st in timed)
        rows.append(f"{trace.index} {k} {len(timed)} {twin_s:.4f} {window:.4f} {len(set(stamps))}")
    return "\n".join(rows)


def delivered_slowdown(backend: Any, since: float, until: float) -> float | None:
    """How much slower than its scenario the twin ran, as its client could see it: the wall
    time of its finished requests' steps that ended in [since, until] (unix), each from the
    request's previous step's end, over their scheduled time; None where no step ended then.
    A starved host wakes the twin late, and once it falls a step behind its clock its steps run
    longer than scheduled, short steps by more (beside a busy loop: two canaries 16% slower
    and a watch alert 5 s before a switch, correctly; a suite run read a watch's speedup at
    x0.83 against the scenario's x0.59, tests/test_watch_speedup.py)."""
    steps = [
        step
        for rid in backend.truth_ids()
        for step in backend.truth(rid)["steps"]
        if since <= step["t_end_unix"] <= until
    ]
    if not steps:
        return None
    return sum(st["wall_s"] for st in steps) / sum(st["step_s"] for st in steps)
