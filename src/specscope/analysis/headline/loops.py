"""Repetition loops behind the headline's commit length. Pure: no I/O.

Why: a model that keeps generating past its answer (ignore_eos) often falls into a loop, and a
loop is trivially easy to draft: on a real server 10-13 of ~16 requests looped, an n-gram drafter
committed 7-8 tokens a step there against 1-2 on the answers. When most of the requests behind
the headline loop, the headline's commit length (and every conclusion drawn from it) describes
the loop, not the workload, and the user must read that beside the figure, with the commit
length of the requests that did not loop and the way out (`--no-ignore-eos`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specscope.analysis.steps.repetition import find_loop
from specscope.trace.model import RequestTrace

# Every dominance note holds this: a report that has only the analysis' notes (diagnose's
# terminal panel) finds the note by it and prints it beside the commit length.
NOTE_MARK = " requests end in repetition loops ("


@dataclass(frozen=True)
class LoopReading:
    """How many of the requests behind the headline's commit length end in a loop, and the
    commit length with and without them."""

    requests: int  # requests behind the headline's commit length
    looping: int  # of them, those whose output ends in a repetition loop
    mean_commit_len: float | None  # the headline's
    without_loops: float | None  # over the others; None when unknown (run-level source, all loop)
    ignore_eos: bool  # the looping requests asked to generate past the end of turn

    @property
    def dominant(self) -> bool:
        """More than half of the requests loop: the figure is mostly the loops'."""
        return 2 * self.looping > self.requests

    @property
    def note(self) -> str | None:
        """The sentence the reports print beside the headline (only when loops dominate)."""
        if not self.dominant:
            return None
        why = (
            "the model kept generating past its answer"
            if self.ignore_eos
            else "the model loops on these prompts by itself"
        )
        over_all = (
            f"commit length {self.mean_commit_len:.2f} over all"
            if self.mean_commit_len is not None
            else "commit length unknown over all"
        )
        if self.without_loops is not None:
            without = f", {self.without_loops:.2f} without them"
        elif self.looping == self.requests:
            without = ", no request without a loop to compare"
        else:
            without = ", no per-request figure to leave them out"
        hint = "; --no-ignore-eos ends requests at the end of turn" if self.ignore_eos else ""
        return (
            f"{self.looping} of {self.requests}{NOTE_MARK}{why}): "
            f"the figure reads the loops more than the workload, {over_all}{without}{hint}"
        )

    def to_json(self) -> dict[str, Any]:
        """The contract's `headline_loops` object."""
        return {
            "requests": self.requests,
            "looping_requests": self.looping,
            "dominant": self.dominant,
            "mean_commit_len": self.mean_commit_len,
            "mean_commit_len_without_loops": self.without_loops,
            "note": self.note,
        }


def loop_reading(
    members: Sequence[tuple[RequestTrace, tuple[float, float] | None]],
    mean_commit_len: float | None,
) -> LoopReading | None:
    """The loops among `members` (each request behind the commit length with its own (tokens,
    steps), None where the figure is run-level), or None when no request loops. The commit
    length without them uses the same per-request counts as the figure itself, so the two
    differ only by the looping requests."""
    looping = [t for t, _ in members if find_loop(t.text) is not None]
    if not looping:
        return None
    ids = {t.index for t in looping}
    rest = [c for t, c in members if t.index not in ids]
    without = None
    if rest and all(c is not None for c in rest):
        steps = sum(c[1] for c in rest if c is not None)
        tokens = sum(c[0] for c in rest if c is not None)
        without = tokens / steps if steps else None
    return LoopReading(
        requests=len(members),
        looping=len(looping),
        mean_commit_len=mean_commit_len,
        without_loops=without,
        ignore_eos=any(t.spec.ignore_eos for t in looping),
    )
