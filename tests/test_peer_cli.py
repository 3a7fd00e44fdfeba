"""specscope's probe and logs against llama.cpp's real speculative server (xllamacpp, real
weights), checked against what the server counted.

For each mode (no speculation, draft model, n-gram) one server runs for the whole module; the
probe runs against it with `/metrics` scraped around it, then `logs` reads the server's log. The
checks: the probe completes without errors; the client's mean commit length (per-token events
grouped into verify steps by burst clustering) agrees with what the server counted; without
speculation it is 1; the log reader finds what the server logged. Burst clustering times events,
so this module is in the timed lane (tests/conftest.py); `diagnose` and `compare` against
the same servers are in tests/test_peer_cli_diagnose.py.

Bounded: short prompts and generations, every subprocess with a timeout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import import_peer_module, llamacpp_servers, scrape_prometheus
from support.cli import CliResult, specscope_result

import_peer_module("xllamacpp")

from specscope.peers.llamacpp import MODES  # noqa: E402

pytestmark = [pytest.mark.peer, pytest.mark.slow, pytest.mark.timeout(900)]

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
COMMIT_LEN_TOLERANCE = 0.10


@dataclass
class ModeRun:
    mode: str
    url: str
    probe: CliResult
    probe_out: Path
    metrics_delta: dict[str, float]
    logs: CliResult


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModeRun]:
    base = tmp_path_factory.mktemp("peer-cli")
    out: dict[str, ModeRun] = {}
    for srv in llamacpp_servers(base):
        probe_out = base / f"{srv.mode}-probe"
        before = scrape_prometheus(srv.url)
        probe = specscope_result(
            "probe",
            srv.url,
            *PROBE_ARGS,
            "--out",
            str(probe_out),
            "--json",
            timeout_s=CLI_TIMEOUT_S,
        )
        after = scrape_prometheus(srv.url)
        delta = {k: after[k] - before.get(k, 0.0) for k in after}
        # The server log holds exactly the probe's requests.
        logs = specscope_result(
            "logs", str(srv.log_path), "--format", "llamacpp", "--json", timeout_s=CLI_TIMEOUT_S
        )
        out[srv.mode] = ModeRun(srv.mode, srv.url, probe, probe_out, delta, logs)
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
    # clustering was checked against it request by request: it agrees, or (a loaded machine,
    # seen beside two busy processes: a late read splits one step's burst, or merges two
    # steps' bursts) the check names which and the figure above is the server's, still right.
    flagged = (
        "(disagree: the client's bursts may split steps)",
        "(disagree: the client's bursts merge steps)",
    )
    for check in summary["steps"]["cross_checks"]:
        assert check["result"].endswith(("(agree)", *flagged)), check
        if check["result"].endswith(flagged):
            assert summary["mean_commit_len_source"] != "client", summary
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
