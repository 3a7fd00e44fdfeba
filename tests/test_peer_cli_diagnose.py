"""`specscope diagnose` and `compare` against llama.cpp's real speculative server (xllamacpp,
real weights): for each mode (no speculation, draft model, n-gram) one server and one quick
diagnosis; the checks: each completes with the JSON contract's keys; without a drafter no
speculation finding; comparing the draft-model run with the plain one splits the tps ratio into
acceptance x step time and says whether speculation helps here.

Nothing here is timed against the server's own counts (the commit lengths compared are ~1 against
~7), so under xdist this module runs beside the timed lane (tests/conftest.py), not in it;
the probe's checks against the server's counters are in tests/test_peer_cli.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import import_peer_module, llamacpp_servers
from support.cli import CliResult, specscope_result

import_peer_module("xllamacpp")

from specscope.peers.llamacpp import MODES  # noqa: E402

pytestmark = [pytest.mark.peer, pytest.mark.slow, pytest.mark.timeout(900)]

CLI_TIMEOUT_S = 300
# --budget-s 6: the --precision repeats run (the default path) and stay well inside the CLI
# timeout on a slow CPU peer. --workload long-writing: the mix's first category, so the main
# experiments are the default's, without the seven-request workload mix (~40% of a quick
# diagnosis on a CPU peer; the mix is tested against the twin).
DIAGNOSE_ARGS = [
    "--quick",
    "--prompt-tokens",
    "128",
    "--max-tokens",
    "64",
    "--budget-s",
    "6",
    "--workload",
    "long-writing",
]
COMMIT_LEN_TOLERANCE = 0.10
# Outcomes of a finding test that leave the finding out because the data do not show it.
NOT_SHOWN_OUTCOMES = {"interval includes zero effect", "not significant", "below minimum"}


@pytest.fixture(scope="module")
def diagnoses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CliResult]:
    """One `diagnose --quick --json` per mode, each against a server of its own."""
    base = tmp_path_factory.mktemp("peer-cli-diagnose")
    return {
        srv.mode: specscope_result(
            "diagnose",
            srv.url,
            *DIAGNOSE_ARGS,
            "--out",
            str(base / f"{srv.mode}-diagnose"),
            "--json",
            timeout_s=CLI_TIMEOUT_S,
        )
        for srv in llamacpp_servers(base)
    }


@pytest.mark.parametrize("mode", MODES)
def test_quick_diagnose_completes(diagnoses: dict[str, CliResult], mode: str) -> None:
    result = diagnoses[mode].require()
    for key in ("decode_tps", "ttft_s", "mean_commit_len", "mean_step_s", "findings", "run_dir"):
        assert key in result, key
    assert result["decode_tps"] > 0
    assert Path(result["run_dir"]).is_dir()
    for finding in result["findings"]:
        assert {"id", "summary", "confidence", "evidence", "next"} <= finding.keys()
    if mode == "none":
        assert result["mean_commit_len"] == pytest.approx(1.0, rel=COMMIT_LEN_TOLERANCE)
        # No drafter at all (no timings.draft_n, spec counters at 0): blaming one is wrong.
        ids = {f["id"] for f in result["findings"]}
        assert not ids & {"acceptance_low", "speculation_overhead"}, ids
        assert result["speculation"] == "off", result["speculation_reason"]
    if mode == "draft":
        assert result["speculation"] == "on", result["speculation_reason"]


def test_compare_says_whether_the_draft_model_helps(diagnoses: dict[str, CliResult]) -> None:
    plain = diagnoses["none"].require()
    draft = diagnoses["draft"].require()
    result = specscope_result("compare", plain["run_dir"], draft["run_dir"], "--json").require()
    tps_ratio = result["tps_ratio"]
    acceptance = result["acceptance_factor"]
    step_time = result["step_time_factor"]
    # Each side's speculation state: the plain server (a) drafts nothing, the draft model's (b) does.
    assert result["speculation_a"] == "off", result["speculation_reason_a"]
    assert result["speculation_b"] == "on", result["speculation_reason_b"]
    for value in (tps_ratio, acceptance, step_time):
        assert value is not None and math.isfinite(value) and value > 0
    # The two factors split the ratio exactly (ARCHITECTURE §1).
    assert tps_ratio == pytest.approx(acceptance * step_time, rel=0.05)
    # Commit length ~1 versus ~7: the acceptance factor is far from 1 in one direction or the other,
    # and the step-time factor (verify of 9 tokens + 8 draft passes) pulls the other way.
    assert max(acceptance, 1 / acceptance) > 2
    assert (acceptance > 1) != (step_time > 1)

    draft_tps, plain_tps = draft["decode_tps"], plain["decode_tps"]
    # `findings` holds what the comparison itself concludes (ARCHITECTURE §8), including
    # speculation_overhead when the speculative run is the slower one.
    ids = {f["id"] for f in result["findings"]}
    verdict = "helps" if draft_tps > plain_tps else "hurts"
    print(
        f"\nspeculation {verdict}: draft {draft_tps:.1f} tok/s vs plain {plain_tps:.1f} tok/s; "
        f"tps_ratio {tps_ratio:.3f} = acceptance {acceptance:.3f} x step time {step_time:.3f}; "
        f"findings {sorted(ids)}"
    )
    if draft_tps < 0.9 * plain_tps:
        # Clearly slower: the comparison tested speculation_overhead. It is a finding exactly when
        # its test found the slowdown significant and material; when not, the test says why
        # (two --quick runs of a few requests each can leave the interval wide).
        tests = {t["id"]: t for t in result["finding_tests"]}
        test = tests["speculation_overhead"]
        print(f"speculation_overhead test: {test}")
        assert test["reported"] == ("speculation_overhead" in ids), test
        if not test["reported"]:
            assert test["outcome"] in NOT_SHOWN_OUTCOMES, test
