"""The options of `diagnose_run` and `probe_run` check themselves when built: a library caller
gets the refusal the command prints (OptionError, the same message), and the command's one line
and exit 2 come from that same check."""

from __future__ import annotations

import pytest

from specscope.entrypoints import DiagnoseOptions, EmbeddedChoice, OptionError, ProbeOptions
from specscope.probe.client import Timeouts
from specscope.telemetry.evidence import EvidenceSources
from support.diagnose import cli

CASES = [
    ({"max_tokens": 1}, ["--max-tokens", "1"], "--max-tokens must be >= 2 (got 1)"),
    ({"repeat": 101}, ["--repeat", "101"], "--repeat must be within 1..100 (got 101)"),
    (
        {"temperature": -0.5},
        ["--temperature", "-0.5"],
        "--temperature must be within 0..2 (got -0.5)",
    ),
    ({"temperature": 3.0}, ["--temperature", "3"], "--temperature must be within 0..2 (got 3.0)"),
    (
        {"precision": 1.5},
        ["--precision", "1.5"],
        "--precision must be a relative half-width within [0, 1), e.g. 0.05 (got 1.5)",
    ),
    (
        {"embedded": EmbeddedChoice(backend="foo")},
        ["--backend", "foo"],
        "--backend must be engine or twin (got 'foo')",
    ),
    (
        {"url": "http://127.0.0.1:9", "embedded": EmbeddedChoice(scenario="healthy")},
        ["http://127.0.0.1:9", "--scenario", "healthy"],
        "--scenario/--time-scale/--backend apply only to the embedded server (no URL)",
    ),
    (
        {"evidence": EvidenceSources(logs_cmd="'unterminated")},
        ["--logs-cmd", "'unterminated"],
        '--logs-cmd: cannot parse "\'unterminated"',
    ),
]


@pytest.mark.parametrize(("fields", "argv", "message"), CASES)
def test_a_library_caller_gets_the_commands_refusal(tmp_path, fields, argv, message):
    with pytest.raises(OptionError) as err:
        DiagnoseOptions(out=tmp_path / "run", **fields)
    assert str(err.value) == message
    assert isinstance(err.value, ValueError)
    res = cli("diagnose", *argv, "--out", str(tmp_path / "cli"), home=tmp_path)
    assert res.exit_code == 2
    assert res.stderr.strip() == f"error: {message}"
    assert not (tmp_path / "run").exists() and not (tmp_path / "cli").exists()


def test_good_options_build(tmp_path):
    options = DiagnoseOptions(out=tmp_path / "run", quick=True)
    assert options.max_tokens >= 2 and options.repeat == 1


# -- probe: ProbeOptions checks the flags the same way ---------------------------------------

URL = "http://127.0.0.1:9"  # never reached: every case is refused before anything is sent

PROBE_CASES = [
    ({"flavor": "foo"}, ["--flavor", "foo"], "--flavor must be auto or one of"),
    ({"api": "foo"}, ["--api", "foo"], "--api must be completions, chat or native, got 'foo'"),
    (
        {"prompt_tokens": 0},
        ["--prompt-tokens", "0"],
        "--prompt-tokens must be within 1..1048576, got 0",
    ),
    ({"max_tokens": 0}, ["--max-tokens", "0"], "--max-tokens must be >= 1, got 0"),
    ({"repeat": 0}, ["--repeat", "0"], "--repeat must be >= 1, got 0"),
    (
        {"repeat": -1, "concurrency": 0},
        ["--repeat", "-1", "--concurrency", "0"],
        "--repeat must be >= 1, got -1",
    ),
    ({"concurrency": 0}, ["--concurrency", "0"], "--concurrency must be >= 1, got 0"),
    ({"concurrency": 2000}, ["--concurrency", "2000"], "--concurrency must be <= 1024, got 2000"),
    (
        {"repeat": 1000, "concurrency": 1000},
        ["--repeat", "1000", "--concurrency", "1000"],
        "--repeat x --concurrency must be <= 100000, got 1000000",
    ),
    ({"max_commit_len": 0}, ["--max-commit-len", "0"], "--max-commit-len must be >= 1, got 0"),
    (
        {"precision": 1.5},
        ["--precision", "1.5"],
        "--precision must be a relative half-width within [0, 1), e.g. 0.05 (got 1.5)",
    ),
    (
        {"budget_tokens": -1},
        ["--budget-tokens", "-1"],
        "--budget-tokens must be >= 0 (got -1)",
    ),
    (
        {"timeouts": Timeouts(total=float("inf"))},
        ["--timeout-total", "inf"],
        "--timeout-total must be a number of seconds > 0, got inf",
    ),
    # the first refusal in the command's order: --prompt-tokens before --max-tokens
    (
        {"prompt_tokens": 0, "max_tokens": 0},
        ["--prompt-tokens", "0", "--max-tokens", "0"],
        "--prompt-tokens must be within 1..1048576, got 0",
    ),
]


@pytest.mark.parametrize(("fields", "argv", "message"), PROBE_CASES)
def test_a_probe_library_caller_gets_the_commands_refusal(tmp_path, fields, argv, message):
    with pytest.raises(OptionError) as err:
        ProbeOptions(url=URL, out=tmp_path / "run", **fields)
    assert str(err.value).startswith(message)
    res = cli("probe", URL, *argv, "--out", str(tmp_path / "cli"), home=tmp_path)
    assert res.exit_code == 2
    assert res.stderr.strip() == f"error: {err.value}"
    assert not (tmp_path / "run").exists() and not (tmp_path / "cli").exists()


def test_probe_flags_are_refused_before_any_file_is_read(tmp_path):
    """A bad flag is named even when a file flag is bad too: the options are checked first."""
    missing = tmp_path / "missing.json"
    res = cli("probe", URL, "--max-tokens", "0", "--tokenizer", str(missing), home=tmp_path)
    assert res.exit_code == 2
    assert res.stderr.strip() == "error: --max-tokens must be >= 1, got 0"


def test_probe_options_count_requests_from_repeat_or_take_n_requests(tmp_path):
    assert ProbeOptions(url=URL, repeat=3, concurrency=2).n_requests == 6
    assert ProbeOptions(url=URL, n_requests=3, concurrency=2).n_requests == 3
    with pytest.raises(OptionError, match=r"n_requests must be within 1\.\.100000, got 0"):
        ProbeOptions(url=URL, n_requests=0)


def test_good_probe_options_build():
    options = ProbeOptions(url=URL, precision=0.05, budget_s=10.0)
    assert options.n_requests == 1 and options.timeouts == Timeouts()
