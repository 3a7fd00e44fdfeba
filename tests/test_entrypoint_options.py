"""The options of `diagnose_run` check themselves when built: a library caller gets the refusal
the command prints (OptionError, the same message), and the command's one line and exit 2 come
from that same check."""

from __future__ import annotations

import pytest

from specscope.entrypoints import DiagnoseOptions, EmbeddedChoice, OptionError
from specscope.telemetry.evidence import EvidenceSources
from support.diagnose import cli

CASES = [
    ({"max_tokens": 1}, ["--max-tokens", "1"], "--max-tokens must be >= 2 (got 1)"),
    ({"repeat": 101}, ["--repeat", "101"], "--repeat must be within 1..100 (got 101)"),
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
