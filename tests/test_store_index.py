"""The run index: rebuilt from run dirs, survives junk, and `specscope runs` / `compare` read it."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from specscope.cli import app
from specscope.store import RunIndex
from specscope.store.compare import parse_threshold
from specscope.store.index import row_from_dir
from specscope.trace import RunDirWriter, RunInfo


def _run_dir(path, tps, commit, step, status="complete", findings=()):
    w = RunDirWriter(path, RunInfo(kind="diagnose", endpoint="http://127.0.0.1:9"))
    w.write_analysis(
        {
            "decode_tps": tps,
            "mean_commit_len": commit,
            "mean_step_s": step,
            "findings": [{"id": f, "summary": f, "confidence": 0.5} for f in findings],
        }
    )
    w.close(status)
    return path


def test_a_run_whose_every_request_failed_is_listed_failed(tmp_path):
    """It ran to its end (status complete in run.json), but nothing was measured."""
    failed = RunDirWriter(tmp_path / "all-failed", RunInfo(kind="diagnose"))
    failed.write_analysis({"requests": 3, "errors": 3, "decode_tps": None})
    failed.close("complete")
    some = RunDirWriter(tmp_path / "one-failed", RunInfo(kind="diagnose"))
    some.write_analysis({"requests": 3, "errors": 1, "decode_tps": 20.0})
    some.close("complete")
    assert row_from_dir(tmp_path / "all-failed").status == "failed"
    assert row_from_dir(tmp_path / "one-failed").status == "complete"


def test_rescan_indexes_run_dirs_and_drops_deleted_ones(tmp_path):
    home = tmp_path / "home"
    a = _run_dir(home / "a", 100.0, 5.0, 0.05)
    _run_dir(home / "b", 50.0, 2.5, 0.05, status="partial")
    (home / "junk").mkdir()
    (home / "junk" / "run.json").write_text("{not json")
    idx = RunIndex(home)
    assert idx.rescan() == 2
    rows = {r.path.rsplit("/", 1)[-1]: r for r in idx.list()}
    assert set(rows) == {"a", "b"}
    assert rows["a"].decode_tps == 100.0 and rows["b"].status == "partial"
    for f in a.iterdir():
        f.unlink()
    a.rmdir()
    idx.rescan()
    assert [r.path.rsplit("/", 1)[-1] for r in idx.list()] == ["b"]


def test_runs_command_json(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_HOME", str(tmp_path))
    _run_dir(tmp_path / "r1", 80.0, 4.0, 0.05)
    res = CliRunner().invoke(app, ["runs", "--json"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    assert obj["runs"][0]["decode_tps"] == 80.0 and obj["runs"][0]["kind"] == "diagnose"


def test_threshold_parsing():
    assert parse_threshold("10%") == 0.10
    assert parse_threshold("0.25") == 0.25
    for bad in ("ten", "150%", "-5%"):
        try:
            parse_threshold(bad)
        except ValueError:
            continue
        raise AssertionError(bad)


def test_probe_runs_show_their_numbers(tmp_path, monkeypatch, twin_server):
    """A plain `specscope probe` run has no analysis.json; the index reads its summary.json."""
    monkeypatch.setenv("SPECSCOPE_HOME", str(tmp_path))
    handle = twin_server("healthy", time_scale=0.1)
    runner = CliRunner()
    res = runner.invoke(
        app, ["probe", handle.url, "--prompt-tokens", "64", "--max-tokens", "48", "--json"]
    )
    assert res.exit_code == 0, res.output
    probe_tps = json.loads(res.stdout)["summary"]["decode_tps"]
    res = runner.invoke(app, ["runs", "--json"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.stdout)["runs"]
    assert row["kind"] == "probe"
    assert probe_tps and row["decode_tps"] == probe_tps
    assert row["mean_commit_len"] is not None
