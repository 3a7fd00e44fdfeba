"""Probe our own twin server (serve + twin, real HTTP) and check against its ground truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specscope.analysis.steps.reconstruct import reconstruct_steps
from specscope.cli import app
from specscope.trace import RequestTrace, load_run
from specscope.twin.scenario import Scenario
from support.cli import run_specscope
from support.twin_process import twin_process


def _probe_process(sc: Scenario, tmp_path: Path, *args: str) -> tuple[dict, RequestTrace, dict]:
    """`specscope probe ARGS` against the twin of `sc`, each a process of its own (as a user runs
    them: support.twin_process says why): the probe's JSON, its first request and its truth."""
    with twin_process(sc, tmp_path) as srv:
        proc = run_specscope("probe", srv.url, "--json", "--out", str(tmp_path / "run"), *args)
        assert proc.returncode == 0, proc.stderr[-2000:]
        trace = load_run(tmp_path / "run").requests[0]
        truth = srv.truth(trace.request_id or "")
    assert truth is not None, trace.request_id
    return json.loads(proc.stdout), trace, truth


@pytest.mark.parametrize("api", ["native", "completions"])
def test_probe_twin_matches_ground_truth(fast_scenario, tmp_path, api):
    out, trace, truth = _probe_process(
        fast_scenario, tmp_path, "--prompt-tokens", "16", "--max-tokens", "48", "--api", api
    )
    s = out["summary"]
    assert out["flavor"] == "sglang" and s["requests"] == 1 and s["errors"] == 0
    assert trace.spec.prompt_tokens == 16 and trace.completion_tokens == 48
    assert truth["prompt_tokens"] == 16
    commits = [st["commit_len"] for st in truth["steps"]]
    # Our steps start after the first token-bearing read (the prefill chunk); when the client
    # was slow to its first read, that read may hold the twin's first steps too (merged).
    rec = reconstruct_steps(trace, max_commit_len=fast_scenario.acceptance.max_drafts + 1)
    first = next(c.t_ns for c in trace.chunks if c.n_tokens)
    head = sum(c.n_tokens for c in trace.chunks if c.t_ns == first)
    k, acc = 0, 0
    while acc < head:
        acc += commits[k]
        k += 1
    assert acc == head
    assert rec.method == "chunk" and rec.reliable, rec.reason
    assert [st.commit_len for st in rec.steps] == commits[k:]
    truth_step = sum(st["wall_s"] for st in truth["steps"][k:]) / (len(commits) - k)
    if (s.get("client") or {}).get("limits_step_time"):
        # a starved client (seen beside a busy loop: its reads bunched after a late start, the
        # mean step read at 0.52x the twin's) is said, and its timings are not the server's
        assert "more than 10% of a step" in s["client"]["reason"], s["client"]
    else:
        assert truth_step * 0.8 <= rec.mean_step_s <= truth_step * 1.5
    # The client's reliable steps come first (ARCHITECTURE §4): exactly the twin's verify steps
    # after the prefill read.
    assert s["mean_commit_len"] == pytest.approx(sum(commits[k:]) / (len(commits) - k), rel=1e-6)
    assert s["mean_commit_len_source"] == "client"
    if api == "native":
        # the server's completion_tokens / spec_verify_ct is the twin's truth over all its steps
        # (the prefill one included): it agrees with the client within the cross-check's
        # tolerance in one of the two conventions (at 48 tokens they differ by ~7%): the client's
        # steps after the prefill read, or every token over those steps plus the prefill one
        [check] = s["steps"]["cross_checks"]
        assert check["result"].endswith("(agree)")
        with_prefill = trace.completion_tokens / (len(rec.steps) + 1)
        assert (
            min(abs(truth["mean_commit_len"] / v - 1) for v in (s["mean_commit_len"], with_prefill))
            <= 0.05
        ), (truth, with_prefill)


def test_probe_twin_stream_interval_is_flagged_as_coalescing(fast_scenario, tmp_path):
    # SGLang --stream-interval 4: chunks merge steps; client steps must not be trusted, and the
    # server's own fields still give the right commit length.
    data = fast_scenario.model_dump()
    data["streaming"]["stream_interval"] = 4
    # No --max-commit-len: it comes from the server's info (speculative_num_draft_tokens).
    out, trace, truth = _probe_process(
        Scenario.model_validate(data), tmp_path, "--prompt-tokens", "16", "--max-tokens", "96"
    )
    assert any(n.startswith("max commit length") for n in out["notes"])
    s = out["summary"]
    assert s["steps"]["reliable_requests"] == 0
    assert s["steps"]["unreliable_reasons"]
    # Once, on a fresh clone beside a busy loop (2026-12-06), the source was None, with the twin
    # in the test's process (since then a process of its own). The evidence, if it comes back:
    # the summary's notes, the server's fields and the stream's chunks.
    evidence = (out["notes"], trace.server_spec, [(c.t_ns, c.n_tokens) for c in trace.chunks])
    assert s["mean_commit_len_source"] == "server", evidence
    assert s["mean_commit_len"] == pytest.approx(truth["mean_commit_len"], rel=1e-6)
    assert s["mean_step_s_source"] == "derived"


def test_probe_metrics_url_keeps_the_servers_run_delta(twin_server, fast_scenario, tmp_path):
    """`probe --metrics-url`: the server's counters are scraped around the requests and their
    run delta kept in the run's telemetry (what the headline reads the engine's steps from); a
    URL that does not answer is a note in the run, not an error."""
    srv = twin_server(fast_scenario)
    args = ["probe", srv.url, "--json", "--prompt-tokens", "16", "--max-tokens", "48"]
    res = CliRunner().invoke(
        app, [*args, "--metrics-url", f"{srv.url}/metrics", "--out", str(tmp_path / "run")]
    )
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "run")
    deltas = [r for r in run.telemetry if r.get("scope") == "run_delta"]
    assert len(deltas) == 1 and deltas[0]["fields"]["delta"]["verify_steps"] > 0, run.telemetry
    assert any("run-scoped delta record" in n for n in run.info.notes), run.info.notes
    assert run.info.args["metrics_url"] == f"{srv.url}/metrics"
    # the twin is SGLang-like: no per-step engine timing, so no delivery comparison
    s = json.loads(res.stdout)["summary"]
    assert s["server_step_s"] is None and s["delivery_lag_share"] is None
    gone = "http://127.0.0.1:9/metrics"
    res = CliRunner().invoke(app, [*args, "--metrics-url", gone, "--out", str(tmp_path / "r2")])
    assert res.exit_code == 0, res.output
    notes = load_run(tmp_path / "r2").info.notes
    assert any(gone in n and "no scrape before the run" in n for n in notes), notes
