"""Commit length from server records: the one rule, for `specscope logs` (streamed aggregates over
millions of lines) and for the analysis (analysis.acceptance.from_telemetry) alike.

Records say which steps their commit length averages (`fields["commit_len_basis"]`):
- ALL_STEPS: every decode step, drafted or not (what a client observes; SGLang `accept len`,
  llama.cpp figures turned into all-steps ones where the counts allow);
- DRAFTED_STEPS: only steps that drafted something (vLLM's `Mean acceptance length`, llama.cpp's
  `mean len`, a counter delta's `1 + accepted / drafts`): higher wherever steps draft nothing.
Unlabelled records count as all-steps.

The rule: per-step records are the mean when there are any; otherwise summaries, weighted by the
steps they cover when known (`weighted_interval`), else a plain mean (`interval_mean`). A
drafted-steps figure is never the mean commit length: it is `per_drafted_step`, beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DRAFTED_STEPS = "drafted_steps"  # commit_len averages only steps that drafted something
ALL_STEPS = "all_steps"  # commit_len averages every decode step (what a client observes)
#: Formats whose one-step records (n_steps == 1) are verify steps even without scope "step".
STEP_FORMATS = ("ddtree", "avg_commit")


def is_step_record(fmt: str, scope: str | None, n_steps: int | None) -> bool:
    """One verify step (a per-step record), not a summary over many."""
    return scope == "step" or (n_steps == 1 and fmt in STEP_FORMATS)


def basis_of(fmt: str, scope: str | None, fields: dict[str, Any] | None) -> str:
    """Which steps a record's commit length averages."""
    fields = fields or {}
    basis = fields.get("commit_len_basis")
    if isinstance(basis, str):
        return basis
    if fmt == "prometheus" and scope == "run_delta":
        delta = fields.get("delta")
        if isinstance(delta, dict) and delta.get("drafts"):
            return DRAFTED_STEPS
    return ALL_STEPS


@dataclass
class _Sums:
    weighted: float = 0.0  # sum of commit x steps over records with a step count
    steps: float = 0.0
    plain: float = 0.0  # sum of commit over all records
    n: int = 0

    def add(self, commit: float, n_steps: float | None, count: int) -> None:
        self.plain += commit * count
        self.n += count
        if n_steps:
            self.weighted += commit * n_steps * count
            self.steps += n_steps * count

    def merge(self, other: _Sums) -> None:
        self.weighted += other.weighted
        self.steps += other.steps
        self.plain += other.plain
        self.n += other.n

    def mean(self) -> tuple[float | None, str | None, float]:
        if self.steps:
            return self.weighted / self.steps, "weighted_interval", self.steps
        if self.n:
            return self.plain / self.n, "interval_mean", float(self.n)
        return None, None, 0.0


@dataclass(frozen=True)
class CommitFigures:
    mean_commit_len: float | None  # all steps
    basis: str | None  # "step" | "weighted_interval" | "interval_mean" | None
    steps: float  # steps (or records, for a plain mean) behind the mean
    per_drafted_step: float | None  # drafted steps only, when records said so


@dataclass
class CommitTally:
    """Running tally of commit-length evidence; `figures()` applies the rule."""

    step_sum: float = 0.0
    step_n: int = 0
    by_basis: dict[str, _Sums] = field(default_factory=dict)

    def add(
        self,
        commit: float,
        *,
        per_step: bool,
        n_steps: float | None = None,
        basis: str = ALL_STEPS,
        count: int = 1,
    ) -> None:
        if per_step:
            self.step_sum += commit * count
            self.step_n += count
        else:
            self.by_basis.setdefault(basis, _Sums()).add(commit, n_steps, count)

    def merge(self, other: CommitTally) -> None:
        self.step_sum += other.step_sum
        self.step_n += other.step_n
        for basis, sums in other.by_basis.items():
            self.by_basis.setdefault(basis, _Sums()).merge(sums)

    def figures(self) -> CommitFigures:
        drafted, _, _ = self.by_basis.get(DRAFTED_STEPS, _Sums()).mean()
        if self.step_n:
            return CommitFigures(self.step_sum / self.step_n, "step", float(self.step_n), drafted)
        mean, basis, n = self.by_basis.get(ALL_STEPS, _Sums()).mean()
        return CommitFigures(mean, basis, n, drafted)
