"""bench/suite.py (`make bench`): every script of bench/ has an entry, and what an entry needs
decides whether it runs here."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _suite():
    spec = importlib.util.spec_from_file_location("bench_suite", REPO / "bench" / "suite.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_script_has_one_entry():
    suite = _suite()
    names = [b.name for b in suite.BENCHES]
    scripts = sorted(p.stem for p in (REPO / "bench").glob("*.py") if p.stem != "suite")
    assert sorted(names) == scripts  # a new script gets an entry; a removed one loses it
    assert all(set(b.needs) <= set(suite.NEEDS) for b in suite.BENCHES)


def test_what_an_entry_needs_decides_whether_it_runs():
    suite = _suite()
    plain = suite.Bench("x")
    assert suite.missing(plain, long=False) is None
    assert "--long" in suite.missing(suite.Bench("x", needs=("long",)), long=False)
    assert suite.missing(suite.Bench("x", needs=("long",)), long=True) is None
    assert "inputs of your own" in suite.missing(suite.Bench("x", needs=("input",)), long=True)


def test_list_prints_every_command_and_a_bad_name_is_one_line():
    listed = subprocess.run(
        [sys.executable, "bench/suite.py", "--list"], cwd=REPO, capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    assert ".venv/bin/python bench/probe_overhead.py" in listed.stdout
    bad = subprocess.run(
        [sys.executable, "bench/suite.py", "--only", "nonesuch"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode != 0 and bad.stderr.strip().count("\n") == 0
    assert "no such benchmark: nonesuch" in bad.stderr
