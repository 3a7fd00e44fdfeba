"""Probe llama.cpp's real server (xllamacpp, SmolLM2 drafting for its F16 self) and check the
burst reconstruction against the server's own counts: every verify step commits 1 + accepted
drafts, and the first token comes from prefill, so steps + accepted == tokens - 1."""

from __future__ import annotations

import json

import pytest

from conftest import PEER_MODELS_DIR as MODELS_DIR
from conftest import import_peer_module, peer_unavailable

import_peer_module("xllamacpp")

from typer.testing import CliRunner  # noqa: E402

from specscope.analysis.steps.reconstruct import reconstruct_steps  # noqa: E402
from specscope.cli import app  # noqa: E402
from specscope.peers.llamacpp import LlamaCppServer  # noqa: E402
from specscope.peers.models import PeerModelError, ensure_peer_models  # noqa: E402
from specscope.trace import load_run  # noqa: E402

pytestmark = [pytest.mark.peer, pytest.mark.timeout(240)]


def test_probe_real_llamacpp_bursts_match_server_counts(tmp_path):
    try:
        ensure_peer_models(MODELS_DIR, log=lambda _line: None)
    except PeerModelError as exc:
        peer_unavailable(str(exc))
    n = 40
    with LlamaCppServer("draft", models_dir=MODELS_DIR) as srv:
        res = CliRunner().invoke(
            app,
            [
                "probe",
                srv.url,
                "--json",
                "--out",
                str(tmp_path / "run"),
                "--prompt-tokens",
                "24",
                "--max-tokens",
                str(n),
            ],
        )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    s = out["summary"]
    assert out["flavor"] == "llamacpp" and s["errors"] == 0
    assert s["decode_tps"] > 0 and s["ttft_s_p50"] > 0
    trace = load_run(tmp_path / "run").requests[0]
    assert trace.completion_tokens == n and trace.token_count_source == "events"
    accepted = trace.server_spec.accepted_drafts
    assert accepted is not None
    rec = reconstruct_steps(trace)
    assert rec.method == "burst"
    commits = [st.commit_len for st in rec.steps]
    assert sum(commits) == n - 1
    server_steps = n - 1 - accepted  # every step commits one token plus what it accepted
    if rec.reliable:
        assert len(commits) == server_steps, (commits, accepted, rec.reason)
        return
    # A loaded client read one step's tokens apart (a burst split in two): the cross-check with
    # the server's counts caught it, said so, and the headline is the server's all-steps figure.
    assert "disagrees with the server" in rec.reason, rec.reason
    assert s["mean_commit_len_source"] == "server", s
    assert s["mean_commit_len"] == pytest.approx((n - 1) / server_steps, rel=0.05), s
