"""Running aggregates over parsed records: what `specscope logs` prints, computed without
keeping millions of records in memory."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from specscope.telemetry.commit import CommitTally, basis_of, is_step_record
from specscope.telemetry.records import Parsed


@dataclass
class FormatStats:
    """Per-format means (commit length, accept rate, per-position acceptance)."""

    records: int = 0
    commit_sum: float = 0.0
    commit_n: int = 0
    commit_min: float | None = None
    commit_max: float | None = None
    rate_sum: float = 0.0
    rate_n: int = 0
    steps: int = 0  # sum of n_steps where known
    weighted_commit: float = 0.0  # sum of commit_len * n_steps
    pos_sum: list[float] = field(default_factory=list)
    pos_n: list[int] = field(default_factory=list)
    field_sums: Counter[str] = field(default_factory=Counter)
    field_n: Counter[str] = field(default_factory=Counter)

    def add(self, p: Parsed, count: int = 1) -> None:
        """Add `count` identical records (the fast DDTREE path aggregates before adding)."""
        self.records += count
        c = p.get("commit_len")
        if c is not None:
            self.commit_sum += c * count
            self.commit_n += count
            self.commit_min = c if self.commit_min is None else min(self.commit_min, c)
            self.commit_max = c if self.commit_max is None else max(self.commit_max, c)
            n = p.get("n_steps")
            if n:
                self.steps += n * count
                self.weighted_commit += c * n * count
        r = p.get("accept_rate")
        if r is not None:
            self.rate_sum += r * count
            self.rate_n += count
        pos = p.get("per_position")
        if pos:
            while len(self.pos_sum) < len(pos):
                self.pos_sum.append(0.0)
                self.pos_n.append(0)
            for i, v in enumerate(pos):
                self.pos_sum[i] += v * count
                self.pos_n[i] += count
        if p["format"] == "sglang_decode":
            for key in ("gen_throughput", "running_req", "queue_req"):
                v = p["fields"].get(key)
                if v is not None:
                    self.field_sums[key] += v * count
                    self.field_n[key] += count

    def merge(self, other: FormatStats) -> None:
        self.records += other.records
        self.commit_sum += other.commit_sum
        self.commit_n += other.commit_n
        for v in (other.commit_min, other.commit_max):
            if v is not None:
                self.commit_min = v if self.commit_min is None else min(self.commit_min, v)
                self.commit_max = v if self.commit_max is None else max(self.commit_max, v)
        self.rate_sum += other.rate_sum
        self.rate_n += other.rate_n
        self.steps += other.steps
        self.weighted_commit += other.weighted_commit
        while len(self.pos_sum) < len(other.pos_sum):
            self.pos_sum.append(0.0)
            self.pos_n.append(0)
        for i, (v, n) in enumerate(zip(other.pos_sum, other.pos_n, strict=True)):
            self.pos_sum[i] += v
            self.pos_n[i] += n
        self.field_sums.update(other.field_sums)
        self.field_n.update(other.field_n)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "records": self.records,
            "mean_commit_len": self.commit_sum / self.commit_n if self.commit_n else None,
            "min_commit_len": self.commit_min,
            "max_commit_len": self.commit_max,
            "mean_accept_rate": self.rate_sum / self.rate_n if self.rate_n else None,
        }
        if self.steps:
            out["steps"] = self.steps
            out["step_weighted_commit_len"] = self.weighted_commit / self.steps
        if self.pos_sum:
            out["mean_per_position"] = [
                s / n for s, n in zip(self.pos_sum, self.pos_n, strict=True)
            ]
        for key, n in self.field_n.items():
            out[f"mean_{key}"] = self.field_sums[key] / n
        return out


def commit_key(value: float) -> str:
    """Histogram key of a commit length: `"2"` for whole numbers, `"2.5"` otherwise."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass
class LogSummary:
    """Everything `specscope logs` reports, accumulated record by record."""

    lines: int = 0
    bytes: int = 0
    records: int = 0
    malformed: int = 0
    malformed_examples: list[dict[str, Any]] = field(default_factory=list)
    filtered_rank: int = 0
    filtered_time: int = 0
    undated: int = 0
    oversized_lines: int = 0
    formats: Counter[str] = field(default_factory=Counter)
    step_commit: Counter[float] = field(default_factory=Counter)
    step_pairs: Counter[tuple[float, float]] = field(default_factory=Counter)
    by_format: dict[str, FormatStats] = field(default_factory=dict)
    commit: CommitTally = field(default_factory=CommitTally)
    ts_min: float | None = None
    ts_max: float | None = None
    warnings: list[str] = field(default_factory=list)

    def add(self, p: Parsed, count: int = 1) -> None:
        """Add `count` identical records."""
        fmt = p["format"]
        self.records += count
        self.formats[fmt] += count
        stats = self.by_format.get(fmt)
        if stats is None:
            stats = self.by_format[fmt] = FormatStats()
        stats.add(p, count)
        c = p.get("commit_len")
        if c is not None and p.get("scope") != "lifetime":
            per_step = is_step_record(fmt, p.get("scope"), p.get("n_steps"))
            self.commit.add(
                c,
                per_step=per_step,
                n_steps=p.get("n_steps"),
                basis=basis_of(fmt, p.get("scope"), p.get("fields")),
                count=count,
            )
        if p.get("scope") == "step" and c is not None:
            self.step_commit[c] += count
            self.step_pairs[(p.get("accepted_drafts"), c)] += count
        ts = p.get("ts")
        if ts is not None:
            if self.ts_min is None or ts < self.ts_min:
                self.ts_min = ts
            if self.ts_max is None or ts > self.ts_max:
                self.ts_max = ts

    def commit_len_histogram(self) -> dict[str, int]:
        """Commit length -> number of verify steps, from per-step records only."""
        hist: Counter[str] = Counter()
        for value, n in self.step_commit.items():
            hist[commit_key(value)] += n
        return dict(sorted(hist.items(), key=lambda kv: float(kv[0])))

    def mean_commit_len(self) -> tuple[float | None, str | None]:
        """All-steps mean commit length and what it is based on (telemetry.commit's rule):
        per-step records when any exist, else summaries weighted by their step counts, else
        their plain mean; drafted-steps-only figures are not it (`per_drafted_step`)."""
        figs = self.commit.figures()
        return figs.mean_commit_len, figs.basis

    def pairs_table(self) -> list[dict[str, Any]]:
        """The story's `sort | uniq -c | sort -rn` over (accepted drafts, commit length)."""
        rows = [
            {"accepted_drafts": a, "commit_len": c, "count": n}
            for (a, c), n in self.step_pairs.items()
        ]
        rows.sort(key=lambda r: (-r["count"], r["accepted_drafts"] or 0.0, r["commit_len"]))
        return rows

    def to_json(self) -> dict[str, Any]:
        mean, basis = self.mean_commit_len()
        return {
            "records": self.records,
            "malformed": self.malformed,
            "formats": dict(self.formats),
            "commit_len_histogram": self.commit_len_histogram(),
            "mean_commit_len": mean,
            "mean_commit_len_basis": basis,
            "mean_commit_len_per_drafted_step": self.commit.figures().per_drafted_step,
            "steps": sum(self.step_commit.values()),
            "accept_pairs": self.pairs_table(),
            "per_format": {k: v.to_json() for k, v in sorted(self.by_format.items())},
            "lines": self.lines,
            "bytes": self.bytes,
            "filtered": {
                "other_rank": self.filtered_rank,
                "outside_window": self.filtered_time,
                "undated_in_window": self.undated,
            },
            "oversized_lines": self.oversized_lines,
            "malformed_examples": self.malformed_examples,
            "time_range": [self.ts_min, self.ts_max],
            "warnings": self.warnings,
        }


def merge_summaries(
    parts: list[LogSummary], keep_examples: int = 5, consecutive: bool = False
) -> LogSummary:
    """One summary from several. With `consecutive` the parts are byte ranges of one input
    (parallel scanning): malformed examples' line numbers are shifted by the lines before."""
    out = LogSummary()
    lines_before = 0
    for part in parts:
        out.lines += part.lines
        out.bytes += part.bytes
        out.records += part.records
        out.malformed += part.malformed
        for ex in part.malformed_examples:
            if len(out.malformed_examples) < keep_examples:
                shifted = dict(ex)
                if consecutive and shifted.get("line_no") is not None:
                    shifted["line_no"] += lines_before
                out.malformed_examples.append(shifted)
        lines_before += part.lines
        out.filtered_rank += part.filtered_rank
        out.filtered_time += part.filtered_time
        out.undated += part.undated
        out.oversized_lines += part.oversized_lines
        out.formats.update(part.formats)
        out.step_commit.update(part.step_commit)
        out.step_pairs.update(part.step_pairs)
        out.commit.merge(part.commit)
        for name, stats in part.by_format.items():
            mine = out.by_format.setdefault(name, FormatStats())
            mine.merge(stats)
        for ts in (part.ts_min, part.ts_max):
            if ts is not None:
                out.ts_min = ts if out.ts_min is None else min(out.ts_min, ts)
                out.ts_max = ts if out.ts_max is None else max(out.ts_max, ts)
        out.warnings.extend(part.warnings)
    return out
