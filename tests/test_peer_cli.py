"""specscope's own commands against llama.cpp's real speculative server (xllamacpp, real weights).

For each mode (no speculation, draft model, n-gram) one server runs for the whole module; the
probe and a quick diagnose run against it, with `/metrics` scraped around the probe. The checks:
the commands complete without errors; the client's mean commit length (per-token events grouped
into verify steps by burst clustering) agrees with what the server counted; without speculation
it is 1; comparing the draft-model run with the plain run says whether speculation helps here.

Until a command exists (built in parallel), its tests xfail naming the missing command.
Bounded: short prompts and generations, every subprocess with a timeout.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import import_peer_module, peer_unavailable, run_specscope, scrape_prometheus

import_peer_module("xllamacpp")

from specscope.peers.llamacpp import MODES, LlamaCppServer  # noqa: E402
from specscope.peers.models import PeerModelError, ensure_peer_models  # noqa: E402

pytestmark = [pytest.mark.peer, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[1]
MODELS_DIR = REPO / ".cache" / "peer-models"
# One decode thread: with two, llama.cpp's spin barriers make a shared, busy machine ~20x slower.
THREADS = 1
CLI_TIMEOUT_S = 300
PROBE_ARGS = [
    "--flavor",
    "llamacpp",
    "--prompt-tokens",
    "64",
    "--max-tokens",
    "128",
    "--repeat",
    "2",
]
# --budget-s 6: the --precision repeats run (the default path) and stay well inside the CLI
# timeout on a slow CPU peer. --workload long-writing: the mix's first category, so the main
# experiments are the default's, without the seven-request workload mix (~40% of a quick
# diagnosis on a CPU peer; the mix is tested against the twin).
DIAGNOSE_ARGS = ["--quick", "--prompt-tokens", "128", "--max-tokens", "64", "--budget-s", "6",
                 "--workload", "long-writing"]
COMMIT_LEN_TOLERANCE = 0.10
# Outcomes of a finding test that leave the finding out because the data do not show it.
NOT_SHOWN_OUTCOMES = {"interval includes zero effect", "not significant", "below minimum"}


@dataclass
class CliResult:
    command: str
    rc: int
    stdout: str
    stderr: str

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.stdout)

    def require(self) -> dict[str, Any]:
        """The parsed JSON of a successful run; xfail while the command is still a placeholder.

        llama.cpp closes the connection after each streamed response; the probe opens a fresh
        connection per request, so no request may fail on a connection the server dropped.
        """
        if self.rc == 2 and "not implemented" in self.stderr:
            pytest.xfail(
                f"`specscope {self.command}` is not implemented yet ({self.stderr.strip()})"
            )
        assert self.rc == 0, f"specscope {self.command} exited {self.rc}: {self.stderr[-2000:]}"
        return self.json


@dataclass
class ModeRun:
    mode: str
    url: str
    probe: CliResult
    probe_out: Path
    metrics_delta: dict[str, float]
    logs: CliResult
    diagnose: CliResult
    diagnose_out: Path
    notes: dict[str, Any] = field(default_factory=dict)


def _specscope(command: str, *args: str) -> CliResult:
    proc = run_specscope(command, *args, timeout_s=CLI_TIMEOUT_S)
    return CliResult(command, proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModeRun]:
    try:
        ensure_peer_models(MODELS_DIR, log=lambda _line: None)
    except PeerModelError as exc:
        peer_unavailable(str(exc))
    base = tmp_path_factory.mktemp("peer-cli")
    out: dict[str, ModeRun] = {}
    for mode in MODES:
        log_path = base / f"{mode}-llama-server.log"
        with LlamaCppServer(mode, models_dir=MODELS_DIR, log_path=log_path, threads=THREADS) as srv:
            probe_out = base / f"{mode}-probe"
            before = scrape_prometheus(srv.url)
            probe = _specscope("probe", srv.url, *PROBE_ARGS, "--out", str(probe_out), "--json")
            after = scrape_prometheus(srv.url)
            delta = {k: after[k] - before.get(k, 0.0) for k in after}
            # The server log so far holds exactly the probe's requests.
            logs = _specscope("logs", str(log_path), "--format", "llamacpp", "--json")
            diagnose_out = base / f"{mode}-diagnose"
            diagnose = _specscope(
                "diagnose", srv.url, *DIAGNOSE_ARGS, "--out", str(diagnose_out), "--json"
            )
            out[mode] = ModeRun(
                mode, srv.url, probe, probe_out, delta, logs, diagnose, diagnose_out
            )
    return out


def _server_commit_len(tokens: float, requests: int, accepted: float) -> float:
    """Mean tokens per verify step, from server counts.

    The first token of a request comes from prefill; every later verify step commits its accepted
    drafts plus one, so steps = (tokens - requests) - accepted. This counts steps where nothing was
    drafted (n-gram lookup often finds no match), which `1 + accepted/drafts` leaves out.
    """
    steps = tokens - requests - accepted
    return (tokens - requests) / steps


def _requests_jsonl(out: Path) -> list[dict[str, Any]]:
    files = sorted(out.rglob("requests.jsonl"))
    assert files, f"no requests.jsonl under {out}"
    return [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("mode", MODES)
def test_probe_completes_without_errors(runs: dict[str, ModeRun], mode: str) -> None:
    summary = runs[mode].probe.require()["summary"]
    assert summary["requests"] == 2
    assert summary["errors"] == 0
    assert summary["decode_tps"] > 0
    assert summary["mean_commit_len"] is not None
    assert summary["mean_step_s"] is not None and summary["mean_step_s"] > 0


@pytest.mark.parametrize("mode", MODES)
def test_client_commit_length_agrees_with_server_counters(
    runs: dict[str, ModeRun], mode: str
) -> None:
    run = runs[mode]
    summary = run.probe.require()["summary"]
    client = summary["mean_commit_len"]
    completed = summary["requests"] - summary["errors"]
    d = run.metrics_delta
    tokens = d["llamacpp:tokens_predicted_total"]
    accepted = d.get("llamacpp:spec_decode_num_accepted_tokens_total", 0.0)
    drafts = d.get("llamacpp:spec_decode_num_drafts_total", 0.0)
    server = _server_commit_len(tokens, completed, accepted)

    # The same counts as the probe recorded them per request (timings.draft_n_accepted).
    traces = _requests_jsonl(run.probe_out)
    assert sum(t.get("completion_tokens") or 0 for t in traces) == tokens
    if mode == "none":
        assert accepted == drafts == 0
        assert client == pytest.approx(1.0, rel=COMMIT_LEN_TOLERANCE)
        return
    per_request = [t.get("server_spec") or {} for t in traces]
    assert sum(s.get("accepted_drafts") or 0 for s in per_request) == accepted
    assert (
        sum(s.get("proposed_drafts") or 0 for s in per_request)
        == d["llamacpp:spec_decode_num_draft_tokens_total"]
    )
    assert client == pytest.approx(server, rel=COMMIT_LEN_TOLERANCE)
    # Where a request's timings give the server's all-steps figure, the client's burst
    # clustering was checked against it request by request.
    for check in summary["steps"]["cross_checks"]:
        assert check["result"].endswith("(agree)"), check
    if mode == "draft":  # a draft model drafts at every step: both server formulas coincide
        assert client == pytest.approx(1 + accepted / drafts, rel=COMMIT_LEN_TOLERANCE)
        assert client > 2  # SmolLM2 Q4_1 predicts its F16 self well (85-96 % acceptance)


@pytest.mark.parametrize("mode", MODES)
def test_logs_reads_the_real_server_log(runs: dict[str, ModeRun], mode: str) -> None:
    run = runs[mode]
    result = run.logs.require()
    assert result["malformed"] == 0
    if mode == "none":
        assert result["mean_commit_len"] in (None, pytest.approx(1.0))
        return
    if run.metrics_delta.get("llamacpp:spec_decode_num_drafts_total", 0.0) == 0:
        return  # nothing drafted (n-gram found no match): the server logs no acceptance line
    # One `draft acceptance = ... (A accepted / G generated)` line per request that drafted.
    assert result["records"] >= 1
    assert any(name.startswith("llamacpp") for name in result["formats"])


@pytest.mark.parametrize("mode", MODES)
def test_quick_diagnose_completes(runs: dict[str, ModeRun], mode: str) -> None:
    result = runs[mode].diagnose.require()
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


def test_compare_says_whether_the_draft_model_helps(runs: dict[str, ModeRun]) -> None:
    plain = runs["none"].diagnose.require()
    draft = runs["draft"].diagnose.require()
    result = _specscope("compare", plain["run_dir"], draft["run_dir"], "--json").require()
    tps_ratio = result["tps_ratio"]
    acceptance = result["acceptance_factor"]
    step_time = result["step_time_factor"]
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
