"""The client measures its own timing health (probe/health.py): how late its event loop answers,
on every probe and diagnose; a client starved on purpose is caught, and its diagnosis makes no
step-time or acceptance claim but says the client was the limit (issue #37)."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np

from specscope.analysis.diagnosis.cards import BY_ID
from specscope.analysis.diagnosis.diagnose import analyze
from specscope.probe import health
from specscope.trace import load_run
from support.diagnose import cli


def _lags_s(record: dict) -> np.ndarray:
    return np.asarray(record["lag_us"], dtype=float) / 1e6


def test_a_blocked_loop_shows_as_lag_on_the_grid():
    async def run() -> health.LoopLagMonitor:
        async with health.LoopLagMonitor(worker=3) as m:
            await asyncio.sleep(0.2)
            time.sleep(0.06)  # the loop answers nothing for 60 ms
            await asyncio.sleep(0.2)
        return m

    m = asyncio.run(run())
    rec = m.record()
    assert rec["worker"] == 3 and rec["period_s"] == health.PERIOD_S
    assert len(rec["t_us"]) == len(rec["lag_us"]) == m.samples > 20
    steps = np.diff(rec["t_us"])
    assert (steps > 0).all() and (steps % int(health.PERIOD_S * 1e6) < 2).all()  # on the grid
    assert _lags_s(rec).max() >= 0.04  # the stall, seen by the tick due while it lasted
    m.stop()  # idempotent: the samples stay
    assert m.record()["lag_us"] == rec["lag_us"]


async def _starve(period_s: float = 0.01, stall_s: float = 0.02) -> None:
    """Holds the loop 20 ms of every 30: a client with too much to do between reads."""
    while True:
        time.sleep(stall_s)
        await asyncio.sleep(period_s)


def test_a_starved_client_is_caught_and_its_diagnosis_refuses_step_claims(
    twin_server, tmp_path, monkeypatch
):
    srv = twin_server("healthy", time_scale=0.5)
    enter = health.LoopLagMonitor.__aenter__

    async def starved_enter(self):
        self._starver = asyncio.get_running_loop().create_task(_starve())
        return await enter(self)

    async def starved_exit(self, *exc):
        self._starver.cancel()
        self.stop()

    monkeypatch.setattr(health.LoopLagMonitor, "__aenter__", starved_enter)
    monkeypatch.setattr(health.LoopLagMonitor, "__aexit__", starved_exit)
    out = tmp_path / "starved"
    args = ("--max-tokens", "200", "--prompt-tokens", "64", "--repeat", "3", "--json")
    res = cli("probe", srv.url, *args, "--out", str(out), home=tmp_path)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)["summary"]
    client = summary["client"]
    assert client["limits_step_time"] is True and client["during_decode"] is True
    assert client["lag_excess_s"] > client["limit_share"] * client["median_step_s"]
    assert [w["worker"] for w in client["workers"]] == [0] and client["workers"][0]["samples"]
    # the step time and commit length are still reported
    assert summary["mean_step_s"] and summary["mean_commit_len"]
    run = load_run(out)
    assert len(run.client) == 1 and run.client[0]["lag_us"]
    analysis = analyze(run)
    assert analysis.findings[0].id == "client_limited"
    assert analysis.findings[0].cause == "client"
    timed = {c.id for c in BY_ID.values() if c.timed_by_client}
    assert not timed & {f.id for f in analysis.findings}
    assert any(n.startswith("no step_time_drift: not made, the client was the limit")
               for n in analysis.notes)  # fmt: skip
    # the terminal says it beside the step time
    res = cli("probe", srv.url, *args[:-1], "--out", str(tmp_path / "shown"), home=tmp_path)
    assert res.exit_code == 0 and "client was the limit" in res.stdout, res.output


def test_every_probe_records_its_client_health(twin_server, tmp_path):
    srv = twin_server("healthy", time_scale=0.5)
    out = tmp_path / "plain"
    args = ("--max-tokens", "120", "--prompt-tokens", "64", "--repeat", "2", "--json")
    res = cli("probe", srv.url, *args, "--out", str(out), home=tmp_path)
    assert res.exit_code == 0, res.output
    client = json.loads(res.stdout)["summary"]["client"]
    assert client["during_decode"] and client["workers"][0]["decode_samples"] > 0
    assert 0 <= client["lag_p50_s"] <= client["lag_p99_s"] <= client["lag_max_s"]
    assert (out / "client.jsonl").is_file()
