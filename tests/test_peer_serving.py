"""Serving metrics against llama.cpp's own clock: `specscope probe` on the real speculative server
(xllamacpp; draft-model speculation, which commits ~8 tokens a step here, and n-gram, which
commits 1-9), then each request's client TPOT and per-step latency next to the `timings`
llama.cpp returned for that same request.

llama.cpp times generation from the end of prompt processing to the slot's release
(`predicted_ms`, over `predicted_n` tokens, the first one included), so its
`predicted_per_token_ms` = predicted_ms / predicted_n; TTFT is excluded on both sides, and the
definition-matched figure is predicted_ms / (predicted_n - 1) (the first token is sampled from
prefill, not decoded). Its verify steps are predicted_n - 1 - accepted drafts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from conftest import LLAMACPP_THREADS as THREADS
from conftest import PEER_MODELS_DIR as MODELS_DIR
from conftest import import_peer_module, peer_unavailable

import_peer_module("xllamacpp")

from specscope.analysis.serving import request_metrics, timed_steps, tpot_s  # noqa: E402
from specscope.analysis.steps.reconstruct import reconstruct_steps  # noqa: E402
from specscope.cli import app  # noqa: E402
from specscope.peers.llamacpp import LlamaCppServer  # noqa: E402
from specscope.peers.models import PeerModelError, ensure_peer_models  # noqa: E402
from specscope.trace import load_run  # noqa: E402

pytestmark = [pytest.mark.peer, pytest.mark.timeout(300)]

AGREEMENT = 0.05
# Code whose continuation repeats what came before, so that n-gram lookup finds drafts too.
PROMPT = (
    "class Config:\n"
    "    def __init__(self, values):\n"
    "        self.values = values\n\n"
    '    def get_host(self):\n        return self.values["host"]\n\n'
    '    def get_port(self):\n        return self.values["port"]\n\n'
    '    def get_user(self):\n        return self.values["user"]\n\n'
    "    def get_"
)


@pytest.fixture(scope="module", params=["draft", "ngram"])
def spec_server(request: pytest.FixtureRequest) -> Iterator[LlamaCppServer]:
    try:
        ensure_peer_models(MODELS_DIR, log=lambda _line: None)
    except PeerModelError as exc:
        peer_unavailable(str(exc))
    with LlamaCppServer(request.param, models_dir=MODELS_DIR, threads=THREADS) as srv:
        yield srv


def test_tpot_and_step_latency_agree_with_llamacpp_timings(spec_server, tmp_path) -> None:
    out = tmp_path / "run"
    prompt = tmp_path / "prompt.py"
    prompt.write_text(PROMPT, encoding="utf-8")
    res = CliRunner().invoke(
        app,
        [
            "probe",
            spec_server.url,
            "--json",
            "--out",
            str(out),
            "--prompt-file",
            str(prompt),
            "--max-tokens",
            "64",
            "--repeat",
            "3",
            "--slo",
            "ttft=30s,tpot=5s",
        ],
    )
    assert res.exit_code == 0, res.output[-2000:]
    serving = json.loads(res.stdout)["serving"]
    run = load_run(out)
    assert len(run.requests) == 3
    rows = []
    for tr in run.requests:
        raw = tr.server_spec.raw if tr.server_spec else {}
        n, ms = raw["predicted_n"], raw["predicted_ms"]
        steps = tr.server_spec.verify_ct
        ours = tpot_s(tr)
        m = request_metrics(tr, timed_steps(tr), 1)
        rows.append(
            (
                ours,
                ms / 1e3 / (n - 1),
                ms / n,
                len(m.steps),
                steps,
                sum(m.step_latencies_s) / len(m.steps) if m.steps else None,
                ms / 1e3 / steps,
            )
        )
    print(
        "\nTPOT ours / llama.cpp ms/(n-1) / predicted_per_token_ms; steps ours / server; "
        "per-step ours / predicted_ms/steps"
    )
    for r in rows:
        print(
            f"  {r[0] * 1e3:.3f} / {r[1] * 1e3:.3f} / {r[2]:.3f} ms; {r[3]} / {r[4]}; "
            f"{(r[5] or 0) * 1e3:.2f} / {r[6] * 1e3:.2f} ms"
        )
    for ours, theirs, *_ in rows:
        assert ours == pytest.approx(theirs, rel=AGREEMENT)
    for tr, (_, _, _, n_ours, n_server, per_step, theirs) in zip(run.requests, rows, strict=True):
        if n_ours == 0:
            # on a loaded machine a late read merges two steps' bursts, or gaps crowd the burst
            # threshold: the reconstruction then says it cannot trust its bursts (and why)
            # instead of timing wrong steps
            rec = reconstruct_steps(tr)
            assert not rec.reliable and rec.reason, rec.reason
            continue
        assert n_ours == n_server  # one burst of token events per verify step
        assert per_step == pytest.approx(theirs, rel=AGREEMENT)
    run_block = serving["run"]
    mean_theirs = sum(r[1] for r in rows) / len(rows)
    assert run_block["tpot_s"]["mean"] == pytest.approx(mean_theirs, rel=AGREEMENT)
    rel = run_block["per_step_relation"]
    timed = [r for r in rows if r[3]]
    assert run_block["requests_with_timed_steps"] == len(timed)
    if timed:  # the relation holds the steps of the requests whose steps it could time
        assert rel["steps"] == sum(r[4] for r in timed)
    else:
        assert rel is None
    assert run_block["goodput"]["good_requests"] == 3
