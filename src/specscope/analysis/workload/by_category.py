"""Commit length, decode rate and repetition loops per workload category. Pure: no I/O.

Why per category: a drafter's acceptance depends on the text. Code edits that copy the prompt
are easy to draft, long free-form writing and reasoning are hard (the seed story); one mean
over a mix hides that. Commit length and decode tps here are analysis.headline's over each
category's requests (tokens per verify step over all steps, with its one precedence of sources:
`commit_source` is its `mean_commit_len_source`; `*_ci` its 95% intervals), so a category's
figure is computed exactly as the run's headline is. Requests caught in a repetition loop are
counted, and the commit length without them is shown beside it: a loop inflates acceptance.
`copied_share` is the mean share of output copied from the prompt (expected for code edits,
a warning sign for free-form writing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specscope.analysis.headline.headline import Headline, headline
from specscope.analysis.headline.uncertainty import Interval95
from specscope.analysis.steps.reconstruct import StepReconstruction, reconstruct_steps
from specscope.analysis.steps.repetition import copied_share, find_loop
from specscope.trace.model import RequestTrace

UNCATEGORISED = "uncategorised"


def _headline(pairs: list[tuple[RequestTrace, StepReconstruction]]) -> Headline | None:
    """The headline over these (successful) requests; None for none."""
    if not pairs:
        return None
    return headline([t for t, _ in pairs], [r for _, r in pairs])


def _ci(v: Interval95 | None) -> list[float] | None:
    return None if v is None else v.as_list()


def _prompt_text(t: RequestTrace) -> str | None:
    p = t.spec.prompt
    if isinstance(p, str):
        return p
    if isinstance(p, list) and p and isinstance(p[0], dict):
        return "\n".join(str(m.get("content", "")) for m in p)
    return None


def category_table(
    traces: Sequence[RequestTrace],
    reconstructions: Sequence[StepReconstruction] | None = None,
    max_commit_len: int | None = None,
) -> list[dict[str, Any]]:
    """One row per category in first-seen order; [] when no request carries a category."""
    if not any(t.spec.category for t in traces):
        return []
    recs = (
        list(reconstructions)
        if reconstructions is not None
        else [reconstruct_steps(t, max_commit_len=max_commit_len) for t in traces]
    )
    groups: dict[str, list[tuple[RequestTrace, StepReconstruction]]] = {}
    for t, r in zip(traces, recs, strict=True):
        groups.setdefault(t.spec.category or UNCATEGORISED, []).append((t, r))
    rows = []
    for name, pairs in groups.items():
        ok = [(t, r) for t, r in pairs if t.ok]
        loops = {t.index: find_loop(t.text) for t, _ in ok}
        looping = [i for i, lp in loops.items() if lp is not None]
        copies = [c for t, _ in ok if (c := copied_share(_prompt_text(t), t.text)) is not None]
        head = _headline(ok)
        commit = head.mean_commit_len if head else None
        clean_head = (
            _headline([(t, r) for t, r in ok if loops[t.index] is None]) if looping else head
        )
        rows.append(
            {
                "category": name,
                "requests": len(pairs),
                "ok": len(ok),
                "completion_tokens": sum(t.completion_tokens or 0 for t, _ in ok),
                "mean_commit_len": commit,
                "commit_source": head.mean_commit_len_source if head else None,
                "mean_commit_len_ci": _ci(head.mean_commit_len_ci) if head else None,
                "mean_commit_len_without_loops": clean_head.mean_commit_len if clean_head else None,
                "decode_tps": head.decode_tps if head else None,
                "decode_tps_ci": _ci(head.decode_tps_ci) if head else None,
                "looping_requests": len(looping),
                "loop_share_max": max((loops[i].share for i in looping), default=None),  # type: ignore[union-attr]
                "copied_share": sum(copies) / len(copies) if copies else None,
            }
        )
    return rows


def looping_requests(traces: Sequence[RequestTrace]) -> list[dict[str, Any]]:
    """Successful requests whose output ends in a repetition loop: index, category, the loop."""
    out = []
    for t in traces:
        if t.ok and (lp := find_loop(t.text)) is not None:
            out.append({"index": t.index, "category": t.spec.category, **lp.to_dict()})
    return out
