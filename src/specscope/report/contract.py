"""The JSON contract of ARCHITECTURE §8: the one object each command prints with `--json`, built
here and nowhere else (the commands print what these functions return).

Key order is part of the output (a consumer may diff two runs' objects): do not reorder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specscope.analysis.result import HEADLINE_DETAIL_KEYS, Analysis, Finding
from specscope.analysis.workload.keys import diagnosis_workload_keys
from specscope.report.context import ProbeResult
from specscope.store.analyses import plain_values
from specscope.store.compare import Comparison, attribution_json
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
    """Each finding with the §8 keys: id, summary, confidence, factor, evidence, next."""
    return [
        {
            "id": f.id,
            "summary": f.summary,
            "confidence": f.confidence,
            "factor": f.factor,
            "evidence": [plain_values(e.model_dump()) for e in f.evidence],
            "next": f.next,
        }
        for f in findings
    ]


def _request_errors(run: Run) -> list[dict[str, Any]]:
    """The first 50 failed requests of a diagnosis: index, tag, kind, message."""
    return [
        {"index": r.index, "tag": r.spec.tag, "kind": r.error.kind, "message": r.error.message}
        for r in run.requests
        if r.error is not None
    ][:50]


def diagnose_json(analysis: Analysis, run: Run, html_path: Path) -> dict[str, Any]:
    """`diagnose --json`: the §8 keys, plus status/partial/errors/report_html."""
    return {
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
        **diagnosis_workload_keys(run.requests),
    }


def diagnose_failure_json(message: str) -> dict[str, Any]:
    """`diagnose --json` when nothing could be measured: the contract's keys, null numbers, no
    finding, and the error."""
    return {
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


def compare_json(
    comparison: Comparison,
    run_a: Path,
    run_b: Path,
    threshold: float | None,
    failed: bool,
) -> dict[str, Any]:
    """`compare --json`: the comparison (§8 keys), the two run dirs and the regression gate."""
    d = comparison.to_dict()
    d["run_a"], d["run_b"] = str(run_a), str(run_b)
    d["fail_if_slower"] = threshold
    d["failed"] = failed
    return d


def runs_json(home: Path, rows: list[RunRow]) -> dict[str, Any]:
    """`runs --json`: the runs home and every indexed run, newest first."""
    return {"home": str(home), "runs": [r.to_dict() for r in rows]}
