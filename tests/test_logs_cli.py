"""`specscope logs` end to end: the story's histogram from a journal dump, the JSON contract,
the terminal view, filters and exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specscope.cli import app

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
STORY = FIXTURES / "story_journal.log"
STORY_HISTOGRAM = {"1": 35, "2": 67, "3": 63, "4": 40, "5": 20, "6": 10, "7": 2}
STORY_UNIQ = [  # the story's `sort | uniq -c | sort -rn` output, in order
    (67, 1.0, 2.0),
    (63, 2.0, 3.0),
    (40, 3.0, 4.0),
    (34, 0.0, 1.0),
    (20, 4.0, 5.0),
    (10, 5.0, 6.0),
    (2, 6.0, 7.0),
    (1, 1.0, 1.0),
]
runner = CliRunner()


def _json(args: list[str]) -> dict:
    result = runner.invoke(app, ["logs", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_story_histogram_exactly():
    out = _json([str(STORY)])
    for key in ("records", "malformed", "formats", "commit_len_histogram", "mean_commit_len"):
        assert key in out
    assert out["commit_len_histogram"] == STORY_HISTOGRAM
    pairs = [(p["count"], p["accepted_drafts"], p["commit_len"]) for p in out["accept_pairs"]]
    assert pairs == STORY_UNIQ
    assert out["mean_commit_len"] == pytest.approx(692 / 237)  # the story's "~2.9 tokens per step"
    assert out["formats"] == {"ddtree": 237, "sglang_decode": 5}
    assert out["malformed"] == 0
    assert out["filtered"]["other_rank"] == 237 * 3 + 0  # TP1..TP3 duplicates dropped


@pytest.mark.skipif(not (shutil.which("grep") and shutil.which("sed")), reason="needs grep/sed")
def test_story_matches_the_real_shell_pipeline():
    """The story's exact command on the same file gives the same counts."""
    pipeline = (
        'sed "s/[[:cntrl:]]//g" "$1" | grep "TP0\\].*DDTREE metrics" | '
        'grep -oE "avg_accepted_drafts=[0-9.]+ avg_commit_len=[0-9.]+" | sort | uniq -c | sort -rn'
    )
    text = subprocess.run(
        ["bash", "-c", pipeline, "_", str(STORY)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    shell = []
    for line in text.splitlines():
        n, pair = line.split(None, 1)
        a, c = (float(kv.split("=")[1]) for kv in pair.split())
        shell.append((int(n), a, c))
    ours = [
        (p["count"], p["accepted_drafts"], p["commit_len"])
        for p in _json([str(STORY)])["accept_pairs"]
    ]
    assert sorted(ours) == sorted(shell)


def test_rank_all_and_other_rank():
    everything = _json([str(STORY), "--rank", "all"])
    assert everything["formats"]["ddtree"] == 237 * 4
    tp1 = _json([str(STORY), "--rank", "TP1"])
    assert tp1["formats"] == {"ddtree": 237}


def test_time_window():
    # The fixture spans 10:00:00 .. 10:00:59 (four steps per second).
    first = _json([str(STORY), "--until", "2026-11-29T10:00:10"])
    assert first["steps"] == 40
    rest = _json([str(STORY), "--since", "2026-11-29T10:00:10"])
    assert first["steps"] + rest["steps"] == 237


def test_format_selection():
    only_sglang = _json([str(STORY), "--format", "sglang"])
    assert only_sglang["formats"] == {"sglang_decode": 5}
    assert only_sglang["commit_len_histogram"] == {}
    assert only_sglang["mean_commit_len"] == pytest.approx(2.92)
    assert only_sglang["mean_commit_len_basis"] == "interval_mean"


def test_every_reference_fixture_together():
    files = [str(p) for p in sorted(FIXTURES.glob("*_reference.log"))]
    out = _json([*files, "--rank", "all"])
    assert out["formats"] == {
        "sglang_decode": 2,
        "vllm_spec": 2,
        "llamacpp_log": 3,
        "ddtree": 2,
        "avg_commit": 1,
    }
    assert out["malformed"] == 2  # the two templates with placeholders


def test_terminal_view_shows_histogram_bars():
    result = runner.invoke(app, ["logs", str(STORY)], env={"COLUMNS": "120"})
    assert result.exit_code == 0
    assert "Commit length per verify step" in result.output
    assert "█" in result.output and "67" in result.output
    assert "mean commit length 2.92 over 237 steps" in result.output
    assert "accepted_drafts=1.00 but commit_len=1.00" in result.output


def test_verbose_shows_malformed_lines():
    result = runner.invoke(
        app,
        ["logs", str(FIXTURES / "templates_reference.log"), "--verbose"],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0
    assert "first 2 malformed lines" in result.output
    assert "templates_reference.log:1" in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["/no/such/file.log"], "no such file"),
        ([str(FIXTURES)], "is a directory"),
        ([str(STORY), "--since", "tomorrow-ish"], "not a time"),
        ([str(STORY), "--format", "tgi"], "--format must be one of"),
        ([str(STORY), "--pattern", "(oops"], "does not compile"),
        ([], "needs a PATH"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, needle):
    result = runner.invoke(app, ["logs", *args, "--json"])
    assert result.exit_code == 2
    assert needle in " ".join(result.output.split())  # rich wraps long messages
    assert "Traceback" not in result.output


def test_stdin_dash_in_a_real_process():
    proc = subprocess.run(
        [sys.executable, "-m", "specscope.cli", "logs", "-", "--json"],
        input=STORY.read_bytes(),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["commit_len_histogram"] == STORY_HISTOGRAM
