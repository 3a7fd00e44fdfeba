"""Commit length, decode rate and repetition loops per workload category. Pure: no I/O.

Why per category: a drafter's acceptance depends on the text. Code edits that copy the prompt
are easy to draft, long free-form writing and reasoning are hard (the seed story); one mean
over a mix hides that. Commit length here is tokens per verify step over all steps, from the
client's step reconstruction where it is reliable (`commit_source` "client"), else from the
server's per-request figures ("server"), else None. Requests caught in a repetition loop are
counted, and the commit length without them is shown beside it: a loop inflates acceptance.
`copied_share` is the mean share of output copied from the prompt (expected for code edits,
a warning sign for free-form writing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specscope.analysis.repetition import copied_share, find_loop
from specscope.analysis.steps import StepReconstruction, reconstruct_steps, server_mean_commit_len
from specscope.trace.model import RequestTrace

UNCATEGORISED = "uncategorised"


def _commit(pairs: list[tuple[RequestTrace, StepReconstruction]]) -> tuple[float | None, str | None]:
    reliable = [r for _, r in pairs if r.reliable and r.steps]
    steps = sum(len(r.steps) for r in reliable)
    if steps:
        return sum(r.total_commit for r in reliable) / steps, "client"
    tokens = weight = 0.0
    for t, _ in pairs:
        mcl = server_mean_commit_len(t)
        if mcl and t.completion_tokens:
            tokens += t.completion_tokens
            weight += t.completion_tokens / mcl
    return (tokens / weight, "server") if weight else (None, None)


def _prompt_text(t: RequestTrace) -> str | None:
    p = t.spec.prompt
    if isinstance(p, str):
        return p
    if isinstance(p, list) and p and isinstance(p[0], dict):
        return "\n".join(str(m.get("content", "")) for m in p)
    return None


def category_table(traces: Sequence[RequestTrace],
                   reconstructions: Sequence[StepReconstruction] | None = None,
                   max_commit_len: int | None = None) -> list[dict[str, Any]]:
    """One row per category in first-seen order; [] when no request carries a category."""
    if not any(t.spec.category for t in traces):
        return []
    recs = (list(reconstructions) if reconstructions is not None
            else [reconstruct_steps(t, max_commit_len=max_commit_len) for t in traces])
    groups: dict[str, list[tuple[RequestTrace, StepReconstruction]]] = {}
    for t, r in zip(traces, recs, strict=True):
        groups.setdefault(t.spec.category or UNCATEGORISED, []).append((t, r))
    rows = []
    for name, pairs in groups.items():
        ok = [(t, r) for t, r in pairs if t.ok]
        loops = {t.index: find_loop(t.text) for t, _ in ok}
        looping = [i for i, lp in loops.items() if lp is not None]
        windows = [w for t, _ in ok if (w := t.decode_window()) is not None]
        secs = sum(w[1] for w in windows)
        copies = [c for t, _ in ok
                  if (c := copied_share(_prompt_text(t), t.text)) is not None]
        commit, source = _commit(ok)
        clean, _ = _commit([(t, r) for t, r in ok if loops[t.index] is None])
        rows.append({
            "category": name,
            "requests": len(pairs),
            "ok": len(ok),
            "completion_tokens": sum(t.completion_tokens or 0 for t, _ in ok),
            "mean_commit_len": commit,
            "commit_source": source,
            "mean_commit_len_without_loops": clean if looping else commit,
            "decode_tps": sum(w[0] for w in windows) / secs if secs > 0 else None,
            "looping_requests": len(looping),
            "loop_share_max": max((loops[i].share for i in looping), default=None),  # type: ignore[union-attr]
            "copied_share": sum(copies) / len(copies) if copies else None,
        })
    return rows


def looping_requests(traces: Sequence[RequestTrace]) -> list[dict[str, Any]]:
    """Successful requests whose output ends in a repetition loop: index, category, the loop."""
    out = []
    for t in traces:
        if t.ok and (lp := find_loop(t.text)) is not None:
            out.append({"index": t.index, "category": t.spec.category, **lp.to_dict()})
    return out
