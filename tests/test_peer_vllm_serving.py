"""Serving metrics against vLLM's own Prometheus histograms: `specscope probe` on the real vLLM
peer (CPU build, n-gram speculation, `python -m specscope.peers.vllm`), then the run's numbers
next to the /metrics deltas over the same requests.

- TPOT vs `vllm:request_time_per_output_token_seconds` (one observation per request:
  decode time / (generation tokens - 1)): the means agree.
- Inter-step latency vs `vllm:inter_token_latency_seconds`, which vLLM observes once per output
  event (per engine step, however many tokens the step committed): the client's timed steps are
  those events, so counts are equal and means agree. Its per-token latency is that mean divided
  by the commit length, not vLLM's "ITL".
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from specscope.cli import app

vllm_peer = pytest.importorskip("specscope.peers.vllm")
vllm_install = pytest.importorskip("specscope.peers.vllm_install")

pytestmark = [pytest.mark.peer, pytest.mark.timeout(600)]

AGREEMENT = 0.05


def _histograms(url: str) -> dict[str, float]:
    """`_sum` and `_count` of every vLLM histogram, summed over label sets."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith(("_sum", "_count")):
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


@pytest.fixture(scope="module")
def ngram_server() -> Iterator:
    try:
        server = vllm_peer.VllmServer("ngram", enforce_eager=True)
        with server:
            yield server
    except vllm_install.VllmInstallError as exc:
        pytest.skip(str(exc))


def test_tpot_and_step_latency_agree_with_vllm_prometheus(ngram_server, tmp_path) -> None:
    before = _histograms(ngram_server.url)
    res = CliRunner().invoke(app, ["probe", ngram_server.url, "--json", "--out",
                                   str(tmp_path / "run"), "--prompt-tokens", "128",
                                   "--max-tokens", "128", "--repeat", "3"])
    after = _histograms(ngram_server.url)
    assert res.exit_code == 0, res.output[-2000:]
    run = json.loads(res.stdout)["serving"]["run"]

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    tpot = "vllm:request_time_per_output_token_seconds"
    itl = "vllm:inter_token_latency_seconds"
    assert delta(f"{tpot}_count") == run["ok"] == 3
    vllm_tpot = delta(f"{tpot}_sum") / delta(f"{tpot}_count")
    vllm_step = delta(f"{itl}_sum") / delta(f"{itl}_count")
    print(f"\nTPOT ours {run['tpot_s']['mean'] * 1e3:.3f} ms, vLLM {vllm_tpot * 1e3:.3f} ms; "
          f"per step ours {run['inter_step_latency_s']['mean'] * 1e3:.3f} ms over "
          f"{run['inter_step_latency_s']['n']} steps, vLLM {vllm_step * 1e3:.3f} ms over "
          f"{delta(f'{itl}_count'):.0f}")
    assert run["tpot_s"]["mean"] == pytest.approx(vllm_tpot, rel=AGREEMENT)
    assert run["requests_with_timed_steps"] == 3
    assert run["inter_step_latency_s"]["n"] == delta(f"{itl}_count")
    assert run["inter_step_latency_s"]["mean"] == pytest.approx(vllm_step, rel=AGREEMENT)
    rel = run["per_step_relation"]
    assert rel["mean_commit_len"] > 1.0  # speculation committed several tokens per step
