"""Sources: plain and gzip files (truncated too), commands run without a shell (printing,
failing, hanging, missing), binary garbage and over-long lines."""

from __future__ import annotations

import gzip
import json
import os
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specscope.cli import app
from specscope.telemetry import LogQuery, SourceError, read_logs

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
STORY = FIXTURES / "story_journal.log"
STORY_HISTOGRAM = {"1": 35, "2": 67, "3": 63, "4": 40, "5": 20, "6": 10, "7": 2}
runner = CliRunner()


def _hist(**kw) -> dict:
    return read_logs(LogQuery(**kw)).summary.commit_len_histogram()


def test_gzip_file_and_small_blocks(tmp_path):
    gz = tmp_path / "journal.log.gz"
    gz.write_bytes(gzip.compress(STORY.read_bytes()))
    assert _hist(paths=[str(gz)]) == STORY_HISTOGRAM
    # Tiny blocks: lines cut across block boundaries must still be whole when scanned.
    assert _hist(paths=[str(gz)], block_size=97) == STORY_HISTOGRAM
    assert _hist(paths=[str(STORY)], block_size=61) == STORY_HISTOGRAM


def test_multi_member_gzip(tmp_path):
    data = STORY.read_bytes()
    half = data.index(b"\n", len(data) // 2) + 1
    gz = tmp_path / "rotated.gz"
    gz.write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]))
    assert _hist(paths=[str(gz)]) == STORY_HISTOGRAM


def test_truncated_gzip_keeps_what_was_read(tmp_path):
    blob = gzip.compress(STORY.read_bytes())
    gz = tmp_path / "cut.log.gz"
    gz.write_bytes(blob[: len(blob) // 2])
    result = read_logs(LogQuery(paths=[str(gz)]))
    s = result.summary
    assert 0 < s.formats["ddtree"] < 237
    assert any("truncated gzip" in w for w in s.warnings)
    cli = runner.invoke(app, ["logs", str(gz), "--json"])
    assert cli.exit_code == 0
    assert "truncated gzip" in cli.stderr
    assert json.loads(cli.stdout)["records"] == s.records


def test_corrupt_gzip_is_a_warning_not_a_traceback(tmp_path):
    blob = bytearray(gzip.compress(STORY.read_bytes()))
    blob[len(blob) // 2 : len(blob) // 2 + 64] = b"\xff" * 64
    gz = tmp_path / "corrupt.gz"
    gz.write_bytes(bytes(blob))
    result = runner.invoke(app, ["logs", str(gz), "--json"])
    assert result.exit_code == 0
    assert "corrupt gzip" in result.stderr or "truncated gzip" in result.stderr


def test_binary_garbage_and_huge_lines(tmp_path):
    path = tmp_path / "mixed.log"
    garbage = os.urandom(200_000).replace(b"\n", b"")
    huge = b"[2026-11-29 10:00:00 TP0] DDTREE metrics " + b"x" * 3_000_000
    path.write_bytes(garbage + b"\n" + huge + b"\n" + STORY.read_bytes() + b"\x00\xff\xfe\n")
    result = read_logs(LogQuery(paths=[str(path)], max_line=1 << 20, block_size=1 << 16))
    assert result.summary.commit_len_histogram() == STORY_HISTOGRAM
    assert result.summary.oversized_lines >= 1


def _py(code: str) -> str:
    return shlex.join([sys.executable, "-c", code])


def test_logs_cmd_reads_a_real_command():
    code = f"import sys; sys.stdout.buffer.write(open({str(STORY)!r}, 'rb').read())"
    assert _hist(logs_cmd=_py(code)) == STORY_HISTOGRAM
    result = runner.invoke(app, ["logs", "--logs-cmd", _py(code), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["commit_len_histogram"] == STORY_HISTOGRAM


def test_logs_cmd_is_not_run_through_a_shell(tmp_path):
    marker = tmp_path / "pwned"
    # With a shell, `;` would run touch. Without one it is just an argument to echo.
    result = read_logs(LogQuery(logs_cmd=f"echo hello ; touch {marker}"))
    assert not marker.exists()
    assert result.summary.records == 0


def test_logs_cmd_hanging_is_killed_with_a_clear_message():
    with pytest.raises(SourceError, match=r"did not finish within 0\.5s"):
        read_logs(LogQuery(logs_cmd="sleep 30", command_timeout_s=0.5))
    result = runner.invoke(
        app, ["logs", "--logs-cmd", "sleep 30", "--cmd-timeout", "0.5", "--json"]
    )
    assert result.exit_code == 2 and "did not finish" in " ".join(result.output.split())


def test_logs_cmd_that_prints_then_hangs_keeps_its_output():
    line = "[2026-11-29 10:00:00 TP0] DDTREE metrics avg_accepted_drafts=1.00 avg_commit_len=2.00"
    code = f"import sys, time; print({line!r}); sys.stdout.flush(); time.sleep(30)"
    result = read_logs(LogQuery(logs_cmd=_py(code), command_timeout_s=3))
    assert result.summary.commit_len_histogram() == {"2": 1}
    assert any("did not finish" in w for w in result.summary.warnings)


@pytest.mark.parametrize(
    ("cmd", "needle"),
    [
        ("definitely-not-a-command-xyz --since -60s", "command not found"),
        (
            _py("import sys; sys.stderr.write('no journal here\\n'); sys.exit(3)"),
            "exited with status 3: no journal here",
        ),
        ('journalctl "unbalanced', "cannot split"),
    ],
)
def test_logs_cmd_failures_exit_2(cmd, needle):
    result = runner.invoke(app, ["logs", "--logs-cmd", cmd, "--json"])
    assert result.exit_code == 2
    assert needle in " ".join(result.output.split())  # rich wraps long messages
    assert "Traceback" not in result.output


def test_parallel_scan_of_a_big_file_equals_sequential(tmp_path, monkeypatch):
    """Byte ranges cut at line ends, scanned by real worker processes, merge to the same summary
    (malformed examples keep file-wide line numbers)."""
    from specscope.telemetry import parallel

    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 1)
    path = tmp_path / "big.log"
    bad = b"[2026-11-29 10:00:00 TP0] DDTREE metrics avg_commit_len=oops\n"
    path.write_bytes(STORY.read_bytes() * 3 + bad)
    seq = read_logs(LogQuery(paths=[str(path)], jobs=1)).summary.to_json()
    par = read_logs(LogQuery(paths=[str(path)], jobs=3)).summary.to_json()
    seq_formats, par_formats = seq.pop("per_format"), par.pop("per_format")
    assert par == seq
    for name, stats in seq_formats.items():  # float sums differ only in summation order
        for key, value in stats.items():
            expected = pytest.approx(value) if isinstance(value, float | list) else value
            assert par_formats[name][key] == expected
    assert seq["commit_len_histogram"] == {k: 3 * v for k, v in STORY_HISTOGRAM.items()}
    assert seq["malformed_examples"][0]["line_no"] == 3 * 1007 + 1
