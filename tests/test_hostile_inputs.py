"""Hostile files, flags and environments: a thousand --jobs, a sparse multi-GB log, a log
command whose child hangs, a corrupt run index, a runs home that is a file, --out that is a
file, a scenario that is a binary. Each is one clear line and the right exit code, no traceback,
memory and processes bounded."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from specscope.cli import app
from specscope.telemetry import parallel
from specscope.telemetry.ingest import LogQuery, read_logs

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
STORY = FIXTURES / "story_journal.log"
runner = CliRunner()


def _cli(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specscope.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _in_process(*args: str, home: Path) -> Result:
    """The CLI in this process, for exit codes and messages (no interpreter start-up per call);
    any exception but the exit itself would be a traceback a user sees."""
    res = runner.invoke(app, list(args), env={"SPECSCOPE_HOME": str(home)})
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res


def _clean(res: subprocess.CompletedProcess | object) -> None:
    text = getattr(res, "stderr", "") + getattr(res, "stdout", "")
    assert "Traceback" not in text, text[-3000:]


# -- processes and memory bounded ------------------------------------------------------------


def test_jobs_are_capped_at_the_usable_cpus(tmp_path, monkeypatch):
    big = tmp_path / "big.log"
    big.write_bytes(STORY.read_bytes() * 40)
    workers: list[int] = []
    real_pool = parallel.ProcessPoolExecutor

    def spy(max_workers: int, **kw):
        workers.append(max_workers)
        # Checked before any fork: a regression must fail here, not fork 100000 processes.
        assert max_workers < len(os.sched_getaffinity(0)), max_workers
        return real_pool(max_workers=max_workers, **kw)

    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 1)
    monkeypatch.setattr(parallel, "ProcessPoolExecutor", spy)
    res = runner.invoke(app, ["logs", str(big), "--jobs", "100000", "--json"])
    assert res.exit_code == 0, res.output
    cpus = len(os.sched_getaffinity(0))
    assert all(w <= cpus - 1 for w in workers)  # the parent scans one range itself
    if cpus < 100000:
        assert "--jobs 100000: using" in res.stderr
    seq = read_logs(LogQuery(paths=[str(big)])).summary
    assert f'"records": {seq.records}' in res.stdout


# Runs a command and prints its peak RSS (KiB, over it and every process it waited for) on the
# last line of stderr: measured in a fresh process, so earlier tests' children do not count.
PEAK_RSS = (
    "import resource, subprocess, sys\n"
    "rc = subprocess.run(sys.argv[1:]).returncode\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(rc)\n"
)


def test_a_sparse_file_is_cut_into_ranges_with_bounded_memory(tmp_path):
    sparse = tmp_path / "sparse.log"
    with open(sparse, "wb") as f:  # 1 GiB of zeros without a newline, then one real log
        f.truncate(1 << 30)
        f.seek(0, os.SEEK_END)
        f.write(STORY.read_bytes())
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            PEAK_RSS,
            sys.executable,
            "-m",
            "specscope.cli",
            "logs",
            str(sparse),
            "--jobs",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    _clean(res)
    assert res.returncode == 0, res.stderr[-2000:]
    peak_kib = int(res.stderr.strip().splitlines()[-1])
    assert peak_kib < 400 << 10, f"peak RSS {peak_kib} KiB"  # far below the 1 GiB
    assert json.loads(res.stdout)["records"] > 0  # the real log after the zeros is read


def test_logs_cmd_child_is_killed_with_its_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    cmd = f"sh -c 'sleep 999 & echo $! > {pidfile}; wait; echo done'"
    t0 = time.monotonic()
    res = runner.invoke(app, ["logs", "--logs-cmd", cmd, "--cmd-timeout", "1"])
    assert time.monotonic() - t0 < 30
    assert res.exit_code == 2 and "did not finish within 1s" in res.stderr
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid), "the grandchild outlived the timeout"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.parametrize(
    "flag",
    [
        ["logs", "--logs-cmd", "true", "--cmd-timeout", "-5"],
        ["diagnose", "http://127.0.0.1:9", "--logs-cmd", "true", "--logs-timeout", "-5"],
    ],
)
def test_negative_command_timeouts_are_exit_2(flag):
    res = runner.invoke(app, flag)
    assert res.exit_code == 2, res.output
    assert "timeout" in res.stderr


# -- warnings are one unwrapped line -----------------------------------------------------------


def test_a_warning_naming_a_long_path_stays_on_one_line(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "odd [" / "x] [bold]"  # a path with "[/x]"
    deep.mkdir(parents=True)
    blob = bytearray(gzip.compress(STORY.read_bytes()))
    blob[len(blob) // 2 : len(blob) // 2 + 64] = b"\xff" * 64
    gz = deep / "corrupt.gz"
    gz.write_bytes(bytes(blob))
    res = runner.invoke(app, ["logs", str(gz), "--json"])
    assert res.exit_code == 0
    line = next(x for x in res.stderr.splitlines() if "gzip" in x)
    assert str(gz) in line  # whole path on the warning's line: not wrapped, not markup


# -- the run store -----------------------------------------------------------------------------


def test_a_corrupt_index_is_rebuilt_with_a_warning(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "index.sqlite").write_bytes(b"this is not a database" * 100)
    res = _in_process("runs", "--json", home=home)
    _clean(res)
    assert res.exit_code == 0, res.stderr
    assert "rebuilt" in res.stderr
    again = _in_process("runs", "--json", home=home)
    assert again.exit_code == 0 and "rebuilt" not in again.stderr


def test_a_runs_home_that_is_a_file_is_exit_2(tmp_path):
    home = tmp_path / "file"
    home.write_text("x")
    for args in (["runs"], ["diagnose", "http://127.0.0.1:9"], ["probe", "http://127.0.0.1:9"]):
        res = _in_process(*args, home=home)
        _clean(res)
        assert res.exit_code == 2, (args, res.stderr)
        assert str(home) in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_out_that_is_a_file_or_unwritable_is_exit_2(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    res = runner.invoke(app, ["diagnose", "http://127.0.0.1:9", "--out", str(f)])
    assert res.exit_code == 2 and "not a directory" in res.stderr
    res = runner.invoke(app, ["probe", "http://127.0.0.1:9", "--out", str(f / "sub")])
    assert res.exit_code == 2, res.output
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        res = runner.invoke(app, ["diagnose", "http://127.0.0.1:9", "--out", str(ro / "run")])
        assert res.exit_code == 2 and "cannot create" in res.stderr


# -- scenarios ---------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["/bin/ls", "/nonexistent.toml"])
def test_a_scenario_that_is_not_a_toml_file_is_exit_2(tmp_path, scenario):
    for args in (
        ["serve", "--scenario", scenario, "--port", "0"],
        ["diagnose", "--scenario", scenario, "--out", str(tmp_path / "run")],
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert scenario in res.stderr
        assert res.exception is None or isinstance(res.exception, SystemExit)
