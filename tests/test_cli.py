"""The one typer app (src/specscope/cli.py): its commands and `--version`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import version

import pytest
from typer.testing import CliRunner

from specscope.cli import app


def test_version_prints_the_installed_version_and_exits_0():
    done = CliRunner().invoke(app, ["--version"])
    assert done.exit_code == 0, done.output
    assert done.output.strip() == f"specscope {version('specscope')}"
    assert re.fullmatch(r"specscope \d+\.\d+\.\d+\S*", done.output.strip())


def test_every_command_is_listed_in_the_help():
    done = CliRunner().invoke(app, ["--help"])
    assert done.exit_code == 0
    for name in ("probe", "logs", "diagnose", "compare", "report", "serve", "runs"):
        assert re.search(rf"\b{name}\b", done.output), name


def _console(*args: str) -> subprocess.CompletedProcess[str]:
    """The console script as a program driving specscope runs it (stdout and stderr apart)."""
    return subprocess.run(
        [sys.executable, "-m", "specscope.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "100"},
    )


@pytest.mark.parametrize(
    "args",
    [
        ("diagnose", "--bogus"),  # the parser's own error
        ("compare", "/no/such/run-a", "/no/such/run-b"),  # the command's (fail_usage)
        ("logs", "/no/such/server.log"),
        ("probe", "http://127.0.0.1:9", "--max-tokens", "0"),
    ],
)
def test_json_errors_leave_one_object_on_stdout(args):
    done = _console(*args, "--json")
    assert done.returncode == 2, done.stderr
    obj = json.loads(done.stdout)  # exactly one object, nothing else
    assert set(obj) == {"error", "exit_code"} and obj["exit_code"] == 2
    assert obj["error"] and "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["probe", "diagnose", "compare", "report", "logs", "serve"])
def test_help_shows_no_type_tags_that_say_nothing(command):
    done = _console(command, "--help")
    assert done.returncode == 0
    assert "<bool>" not in done.stdout and "<str>" not in done.stdout, done.stdout
    if command == "diagnose":
        assert "<path>" in done.stdout and "<int>" in done.stdout  # informative tags stay
        assert re.search(r"--workload\s+WORKLOAD", done.stdout)


def test_a_usage_error_is_one_line_not_a_box():
    done = _console("probe", "http://127.0.0.1:9", "--concurrency", "abc")
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("error: Invalid value for '--concurrency'"), done.stderr
    assert lines[1:] == ["see 'specscope probe --help'"]
    assert "╭" not in done.stderr and "Traceback" not in done.stderr


def test_no_arguments_is_the_help():
    done = _console()
    assert done.returncode == 2 and "Usage: specscope" in done.stderr + done.stdout
