"""`requests.csv` (one row per request) and `steps.csv` (one row per timed verify step) for
spreadsheets and other tools. Columns are `analysis.serving.REQUEST_COLUMNS` / `STEP_COLUMNS`,
documented in docs/metrics.md; an unknown value is an empty cell."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from specscope.analysis.serving import REQUEST_COLUMNS, STEP_COLUMNS, export_rows
from specscope.trace import Run

REQUESTS_CSV = "requests.csv"
STEPS_CSV = "steps.csv"


def _write(path: Path, columns: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        w.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows)
    tmp.replace(path)


def write_csv(run: Run, out_dir: Path, *, max_commit_len: int | None = None) -> tuple[Path, Path]:
    """Both files under `out_dir` (created); returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    req_rows, step_rows = export_rows(run, max_commit_len=max_commit_len)
    req_path, step_path = out_dir / REQUESTS_CSV, out_dir / STEPS_CSV
    _write(req_path, REQUEST_COLUMNS, req_rows)
    _write(step_path, STEP_COLUMNS, step_rows)
    return req_path, step_path
