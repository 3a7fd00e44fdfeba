"""The JSON contract of ARCHITECTURE §8: the one object each command prints with `--json`, built
here and nowhere else (the commands print what these functions return).

Key order is part of the output (a consumer may diff two runs' objects): do not reorder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specscope.analysis.result import (
    HEADLINE_DETAIL_KEYS,
    Analysis,
    Attribution,
    Finding,
    Interval,
)
from specscope.analysis.workload.keys import diagnosis_workload_keys
from specscope.report.context import ProbeResult
from specscope.store.analyses import plain_values
from specscope.store.compare import Comparison
from specscope.store.index import RunRow
from specscope.trace import Run

# diagnose's numbers and objects that are null when nothing was measured
_DIAGNOSE_NULLS = (
    "decode_tps",
    "ttft_s",
    "mean_commit_len",
    "mean_step_s",
    "attribution",
    "breakeven",
    "run_dir",
    "serving",
    "precision",
)


def findings_json(findings: list[Finding]) -> list[dict[str, Any]]:
    """Each finding with the §8 keys: id, summary, confidence, factor, evidence, next, and the
    mechanism: cause (null where undecided), candidates, ruled_out."""
    return [
        {
            "id": f.id,
            "summary": f.summary,
            "confidence": f.confidence,
            "factor": f.factor,
            "evidence": [plain_values(e.model_dump()) for e in f.evidence],
            "next": f.next,
            "cause": f.cause,
            "candidates": list(f.candidates),
            "ruled_out": [r.model_dump() for r in f.ruled_out],
        }
        for f in findings
    ]


def _pair(ci: Interval | None) -> list[float] | None:
    if ci is None or ci.low is None or ci.high is None:
        return None
    return [ci.low, ci.high]


def attribution_json(at: Attribution | None) -> dict[str, Any] | None:
    """The attribution (diagnose's and compare's `attribution`): factors and their [low, high]."""
    if at is None:
        return None
    return {
        "tps_ratio": at.tps_ratio,
        "acceptance_factor": at.acceptance_factor,
        "step_time_factor": at.step_time_factor,
        "tps_ratio_ci": _pair(at.tps_ratio_ci),
        "acceptance_factor_ci": _pair(at.acceptance_factor_ci),
        "step_time_factor_ci": _pair(at.step_time_factor_ci),
        "baseline_run": at.baseline_run,
    }


def _request_errors(run: Run) -> list[dict[str, Any]]:
    """The first 50 failed requests of a diagnosis: index, tag, kind, message."""
    return [
        {"index": r.index, "tag": r.spec.tag, "kind": r.error.kind, "message": r.error.message}
        for r in run.requests
        if r.error is not None
    ][:50]


def diagnose_json(analysis: Analysis, run: Run, html_path: Path) -> dict[str, Any]:
    """`diagnose --json`: the verdict first (short sentences: the rate, its split, what moved,
    the top cause, the next step), the §8 keys, plus status/partial/errors/report_html."""
    return {
        "verdict": list(analysis.verdict),
        "decode_tps": analysis.decode_tps,
        "ttft_s": analysis.ttft_s,
        "mean_commit_len": analysis.mean_commit_len,
        "mean_step_s": analysis.mean_step_s,
        "speculation": analysis.speculation,
        "speculation_reason": analysis.speculation_reason,
        **{k: getattr(analysis, k) for k in HEADLINE_DETAIL_KEYS},
        "findings": findings_json(analysis.findings),
        "attribution": attribution_json(analysis.attribution),
        "breakeven": analysis.breakeven,
        "run_dir": analysis.run_dir,
        "status": run.info.status,
        "status_reason": run.info.status_reason,
        "partial": analysis.partial,
        "requests": len(run.requests),
        "errors": _request_errors(run),
        "no_finding_reason": analysis.no_finding_reason,
        "finding_tests": [plain_values(t.model_dump(mode="json")) for t in analysis.finding_tests],
        "telemetry": run.info.telemetry or None,
        "precision": analysis.precision,
        "report_html": str(html_path),
        "serving": analysis.serving,
        "client": analysis.client,
        **diagnosis_workload_keys(run.requests),
    }


def diagnose_failure_json(message: str) -> dict[str, Any]:
    """`diagnose --json` when nothing could be measured: the contract's keys, null numbers, no
    finding, and the error."""
    return {
        "verdict": [f"Nothing was measured: {message.strip().rstrip('.')}."],
        **dict.fromkeys(_DIAGNOSE_NULLS),
        "findings": [],
        "speculation": "unknown",
        "speculation_reason": "nothing was measured",
        "error": message,
    }


def probe_json(outcome: ProbeResult, endpoint: str) -> dict[str, Any]:
    """`probe --json`: the run, what was detected, the summary (§8 `summary.*`), serving,
    precision, and the first 20 failed requests."""
    return {
        "run_dir": str(outcome.run_dir),
        "endpoint": endpoint,
        "flavor": outcome.info.flavor,
        "api": outcome.info.api,
        "model": outcome.info.model,
        "detection": outcome.detection,
        "notes": outcome.notes,
        "summary": outcome.summary,
        "serving": outcome.serving,
        "precision": outcome.precision,
        "failed_requests": [
            {
                "index": t.index,
                "kind": t.error.kind,
                "message": t.error.message,
                "http_status": t.error.http_status,
            }
            for t in outcome.traces
            if t.error is not None
        ][:20],
    }


def comparison_json(cmp: Comparison) -> dict[str, Any]:
    """A comparison of B against A as §8's compare keys (also what analysis' what_changed
    reads): rates, the split, both sides' speculation, the findings, attribution, breakeven."""
    a, b = cmp.a, cmp.b
    return {
        "verdict": list(cmp.verdict),  # B against A, as diagnose --baseline says it
        "tps_a": cmp.tps_a,
        "tps_b": cmp.tps_b,
        "tps_ratio": cmp.tps_ratio,
        "acceptance_factor": cmp.acceptance_factor,
        "step_time_factor": cmp.step_time_factor,
        "slower_by": cmp.slower_by(),
        # whether each side drafts at all (analysis.speculation), and the evidence
        "speculation_a": a.speculation if a else None,
        "speculation_reason_a": a.speculation_reason if a else None,
        "speculation_b": b.speculation if b else None,
        "speculation_reason_b": b.speculation_reason if b else None,
        "findings": [f.model_dump(mode="json") for f in cmp.findings],
        "new_findings": cmp.new_findings,
        "resolved_findings": cmp.resolved_findings,
        "b_findings": [f.model_dump(mode="json") for f in cmp.b_findings],
        "attribution": attribution_json(cmp.attribution),
        "breakeven": cmp.breakeven,
        "finding_tests": [plain_values(t.model_dump(mode="json")) for t in cmp.finding_tests],
        "what_changed": cmp.what_changed,
    }


def compare_json(
    comparison: Comparison,
    run_a: Path,
    run_b: Path,
    threshold: float | None,
    failed: bool,
) -> dict[str, Any]:
    """`compare --json`: the comparison (§8 keys), the two run dirs and the regression gate."""
    d = comparison_json(comparison)
    d["run_a"], d["run_b"] = str(run_a), str(run_b)
    d["fail_if_slower"] = threshold
    d["failed"] = failed
    return d


def runs_json(home: Path, rows: list[RunRow]) -> dict[str, Any]:
    """`runs --json`: the runs home and every indexed run, newest first."""
    return {"home": str(home), "runs": [r.to_dict() for r in rows]}
