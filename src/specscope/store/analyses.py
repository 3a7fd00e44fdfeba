"""Get a run's Analysis: from its analysis.json, or by analysing its requests again.

`specscope report` and `compare` must work on any run dir, partial ones and ones whose
analysis.json is missing or from an older schema, so re-analysis is the fallback, not an error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specscope.analysis.diagnosis.diagnose import analyze
from specscope.analysis.diagnosis.verdict import verdict, with_partial
from specscope.analysis.result import Analysis
from specscope.trace import Run, load_run


def analyze_run(
    run: Run, baseline: Run | None = None, telemetry: list[Any] | None = None
) -> Analysis:
    """Call the analysis layer (pure). Kept in one place so every command analyses alike."""
    return analyze(run, baseline=baseline, telemetry=telemetry)


def plain_values(obj: Any) -> Any:
    """Numpy scalars (a stray np.bool_ or np.float64 in evidence) as plain Python values."""
    if isinstance(obj, dict):
        return {k: plain_values(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain_values(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and not isinstance(obj, str | bytes):
        try:
            return obj.item()
        except (TypeError, ValueError):
            return str(obj)
    return obj


def analysis_json(analysis: Analysis) -> dict[str, Any]:
    """What analysis.json holds. Never fails on a value type the model did not expect: the
    measurement is already on disk and must get its analysis written."""
    try:
        return analysis.model_dump(mode="json", by_alias=True)
    except Exception:
        raw = plain_values(analysis.model_dump(mode="python", by_alias=True))
        return json.loads(json.dumps(raw, default=str))


def stored_analysis(run: Run) -> Analysis | None:
    if not run.analysis or "findings" not in run.analysis:
        return None  # missing, or some other tool's summary: analyse the requests instead
    try:
        return Analysis.model_validate(run.analysis)
    except ValidationError:
        return None


def load_analysis(run_dir: Path | str, reanalyze: bool = False) -> tuple[Run, Analysis]:
    """The run and its analysis (stored one unless missing, invalid or `reanalyze`)."""
    run = load_run(run_dir)
    a = None if reanalyze else stored_analysis(run)
    if a is None:
        a = analyze_run(run)
        a.run_dir = str(run_dir)
    if run.info.status in ("partial", "failed"):
        a.partial = True
    # an analysis.json from before the verdict gets one from what it holds (no reference
    # window: that needs the steps, which --reanalyze reads)
    a.verdict = with_partial(a.verdict or verdict(a), a.partial)
    return run, a
