"""Compare a baseline run A with an observed run B: the tps ratio split exactly into acceptance
and step time (tps_A / tps_B = (L_A / L_B) * (s_B / s_A)) with its 95% intervals, the findings
that differ, and a regression gate ("B is more than X% slower than A"). `Comparison` is the one
comparison type: `specscope compare` and `compare_runs` both build it here; its JSON (ARCHITECTURE
§8) is report.contract's `comparison_json`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specscope.analysis.result import Analysis, Attribution, Finding, FindingTest
from specscope.store.analyses import analyze_run
from specscope.trace import Run

# Findings whose baseline-relative form (factor set: B measured against A) makes a claim about
# the comparison itself, whatever A's own diagnosis said: "B is slower than plain A because of
# speculation", "B's commit length is below A's". A holding the same id alone (say, a low commit
# length without a baseline) does not make B's comparative finding old news.
COMPARATIVE_IDS = frozenset({"speculation_overhead", "acceptance_low"})


def differing_findings(a_findings: list[Finding], b_findings: list[Finding]) -> list[Finding]:
    """The findings that matter for comparing B with A: B's findings that A does not have,
    plus B's comparative findings measured against A (see COMPARATIVE_IDS)."""
    ids_a = {f.id for f in a_findings}
    return [
        f
        for f in b_findings
        if f.id not in ids_a or (f.id in COMPARATIVE_IDS and f.factor is not None)
    ]


@dataclass
class Comparison:
    tps_a: float | None
    tps_b: float | None
    tps_ratio: float | None  # tps_A / tps_B: > 1 means B is slower
    acceptance_factor: float | None  # L_A / L_B
    step_time_factor: float | None  # s_B / s_A
    # what the comparison concludes: B's findings (factors vs A) that A lacks, plus B's
    # comparative ones (speculation_overhead, acceptance_low against A) even when A has the id
    findings: list[Finding] = field(default_factory=list)
    new_findings: list[str] = field(default_factory=list)  # ids in B, not in A
    resolved_findings: list[str] = field(default_factory=list)  # ids in A, not in B
    b_findings: list[Finding] = field(default_factory=list)  # all of B's, for the reader
    attribution: Attribution | None = None  # B analysed against A (factors and intervals)
    breakeven: dict[str, Any] | None = (
        None  # where B's per-request rate meets A's (analysis.breakeven)
    )
    # every claim tested for B against A, reported or not (why a finding is absent)
    finding_tests: list[FindingTest] = field(default_factory=list)
    a: Analysis | None = None
    b: Analysis | None = None
    what_changed: dict[str, Any] | None = None  # analysis.routing.what_changed, set by the caller
    # B against A in short sentences (B's verdict with A as its baseline; empty without it)
    verdict: list[str] = field(default_factory=list)

    def slower_by(self) -> float | None:
        """Fraction by which B is slower than A (0.25 = 25% slower; negative = faster)."""
        if not self.tps_a or self.tps_b is None:
            return None
        return 1.0 - self.tps_b / self.tps_a


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def compare_analyses(
    a: Analysis, b: Analysis, b_with_baseline: Analysis | None = None
) -> Comparison:
    """Headline comparison. `b_with_baseline` (B analysed against A) supplies the attribution
    and findings when the analysis layer could compute them; headline ratios are the fallback."""
    if b_with_baseline is not None and not b_with_baseline.requests:
        b_with_baseline = None  # nothing to re-analyse (e.g. an imported summary): use B as stored
    at = b_with_baseline.attribution if b_with_baseline is not None else None
    tps_ratio = (
        at.tps_ratio if at and at.tps_ratio is not None else _ratio(a.decode_tps, b.decode_tps)
    )
    acc = (
        at.acceptance_factor
        if at and at.acceptance_factor is not None
        else _ratio(a.mean_commit_len, b.mean_commit_len)
    )
    stf = (
        at.step_time_factor
        if at and at.step_time_factor is not None
        else _ratio(b.mean_step_s, a.mean_step_s)
    )
    b_findings = list((b_with_baseline or b).findings)
    ids_a = {f.id for f in a.findings}
    ids_b = {f.id for f in b_findings}
    return Comparison(
        tps_a=a.decode_tps,
        tps_b=b.decode_tps,
        tps_ratio=tps_ratio,
        acceptance_factor=acc,
        step_time_factor=stf,
        findings=differing_findings(a.findings, b_findings),
        new_findings=sorted(ids_b - ids_a),
        resolved_findings=sorted(ids_a - ids_b),
        b_findings=b_findings,
        attribution=at,
        a=a,
        b=b,
        breakeven=b_with_baseline.breakeven if b_with_baseline is not None else None,
        finding_tests=list(b_with_baseline.finding_tests) if b_with_baseline is not None else [],
        verdict=list(b_with_baseline.verdict) if b_with_baseline is not None else [],
    )


def compare_runs(a: Run, b: Run) -> Comparison:
    """B against A as the baseline, from their traces: what `specscope compare` does for two
    run directories without stored analyses."""
    an_a, an_b = analyze_run(a), analyze_run(b)
    return compare_analyses(an_a, an_b, analyze_run(b, baseline=a))


def parse_threshold(text: str) -> float:
    """'10%' or '0.1' -> 0.10. Raises ValueError with a readable message."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"--fail-if-slower expects a percentage like 10% (got {text!r})") from None
    if not 0 <= value < 1:
        raise ValueError(f"--fail-if-slower must be between 0% and 100% (got {text!r})")
    return value
