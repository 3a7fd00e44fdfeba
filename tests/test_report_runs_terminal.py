"""`specscope runs` at a terminal's usual 80 columns and wider."""

import io

from rich.console import Console

from specscope.report.runs_terminal import WIDE_COLUMNS, render_runs
from specscope.store.index import RunRow

LONG = "/tmp/fault_matrix-4iczp2aa/clean-plain-0/diagnose-run"


def _rows() -> list[RunRow]:
    return [
        RunRow(
            LONG,
            "a",
            "diagnose",
            "http://127.0.0.1:38611",
            "twin-seed-regression",
            1e9,
            "complete",
            30.8,
            3.12,
            0.1013,
        ),
        RunRow(
            "/tmp/b",
            "b",
            "probe",
            "http://127.0.0.1:8411",
            "m",
            1e9,
            "interrupted",
            None,
            None,
            None,
        ),
    ]


def _render(width: int) -> str:
    out = io.StringIO()
    render_runs("specscope-runs", _rows(), Console(file=out, width=width, color_system=None))
    return out.getvalue()


def test_eighty_columns_keep_every_figure_and_the_whole_path():
    text = _render(80)
    assert "…" not in text
    for figure in ("30.8", "3.12", "101.3 ms", "complete", "interrupted"):
        assert figure in text
    # what each run is: its kind, and the model (or twin scenario) under its path
    assert "diagnose" in text and "probe" in text
    assert "twin-seed-regression" in "".join(text.split())
    # the path folds onto more lines, every character kept
    assert LONG in "".join(text.split())
    assert "endpoint" not in text  # no room: `runs --json` has it


def test_a_wide_terminal_shows_the_endpoint():
    text = _render(WIDE_COLUMNS + 10)
    assert "http://127.0.0.1:38611" in text and "diagnose-run" in text
