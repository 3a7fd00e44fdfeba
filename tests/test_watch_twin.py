"""End to end: `specscope watch --json` against a served twin that switches from `healthy` to
`seed-regression` at a known time (twin/switch.py), at half the twin's time scale and a
canary a second: an alert naming step_time (the story's factor at the canary's length) after
the switch and none before, every stdout line one event object, the server's own figures
(Prometheus and the tailed log) in the windows, every window kept in the run directory.
Loopback only; about 45 s of wall time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specscope.twin.server import start_twin_server

SRC = Path(__file__).resolve().parents[1] / "src"
EVENTS = {"start", "window", "alert", "recovered", "error", "diagnosis", "summary"}
SWITCH_AFTER = 22.0
DURATION = 40.0
CANARY_RESOLUTION_S = 2.0  # two canaries at --probe-every 1


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


@pytest.mark.timeout(120)
def test_watch_alerts_step_time_after_the_switch_and_not_before(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    before = time.time()
    handle = start_twin_server(
        "healthy",
        time_scale=0.5,
        switch_to="seed-regression",
        switch_after=SWITCH_AFTER,
        log_file=log,
        decode_log_interval=20,
    )
    switch_at = before + SWITCH_AFTER
    try:
        cmd = [
            sys.executable, "-m", "specscope.cli", "watch", handle.url,
            "--probe-every", "1", "--interval", "2", "--warmup", "8",
            "--duration", str(DURATION), "--metrics-url", f"{handle.url}/metrics",
            "--logs", str(log), "--out", str(tmp_path / "run"), "--json",
        ]  # fmt: skip
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=DURATION + 40, env=_env(), check=False
        )
    finally:
        handle.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events and all(isinstance(e, dict) and e.get("event") in EVENTS for e in events)
    assert events[0]["event"] == "start" and events[-1]["event"] == "summary"
    alerts = [e for e in events if e["event"] == "alert"]
    assert [a for a in alerts if a["t"] < switch_at] == [], alerts
    assert alerts, "no alert after the switch"
    first = alerts[0]
    assert first["factor"] == "step_time" and first["cause"] is None
    assert set(first["candidates"]) == {"host_per_token", "kv_layout"}
    # the change-point estimate is a canary's resolution: the statistic may leave 0 at the
    # canary before the switch (seen under load: 0.56 s before it, at one canary a second)
    assert switch_at - CANARY_RESOLUTION_S <= first["since"] <= first["t"] <= switch_at + 15
    assert first["ci"][0] > 1.0 and first["ratio"] > 1.2
    windows = [e for e in events if e["event"] == "window"]
    assert len(windows) >= DURATION / 2 - 3
    assert any(w["state"] == "warmup" for w in windows)
    assert all(w["speculation"] == "on" for w in windows if w["canaries"])
    sources = {s for w in windows if w["server"] for s in w["server"]["sources"]}
    assert "prometheus" in sources and len(sources) >= 2, sources  # the tailed log's format too
    kept = (tmp_path / "run" / "windows.jsonl").read_text().splitlines()
    assert len(kept) == len(windows)


def test_the_twin_switches_scenario_at_its_time():
    import asyncio

    from specscope.backend import SamplingParams
    from specscope.twin.scenario import load_scenario
    from specscope.twin.switch import SwitchingTwinBackend

    fast = load_scenario("healthy").scaled(0.01)
    backend = SwitchingTwinBackend(fast, load_scenario("seed-regression"), after_s=0.3)

    async def one(rid: str) -> str:
        await backend.prefill(rid, [1, 2, 3], SamplingParams(max_tokens=4))
        await backend.step([rid])
        backend.release(rid)
        return backend.scenario.name

    assert asyncio.run(one("a")) == "healthy"
    assert backend.switched_at_unix is None
    time.sleep(0.35)
    assert asyncio.run(one("b")) == "seed-regression"
    assert backend.scenario.time_scale == 0.01  # the first scenario's time scale is kept
    assert backend.info.extra["switched_at_unix"] == backend.switched_at_unix


def test_serve_refuses_an_unknown_switch_scenario_in_one_line():
    done = subprocess.run(
        [sys.executable, "-m", "specscope.cli", "serve", "--switch-to", "no-such-scenario"],
        capture_output=True, text=True, timeout=60, env=_env(), check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("error: no-such-scenario: no such scenario file")


@pytest.mark.timeout(120)
def test_a_restart_without_speculation_is_survived_and_alerts_speculation_off(tmp_path: Path):
    """The server goes away (canary errors: recorded, no alert), comes back on the same port
    without a drafter: one alert, speculation_off, after it answers again; exit 0."""
    from specscope.twin.scenario import load_scenario

    healthy = load_scenario("healthy").scaled(0.5)
    plain = healthy.model_copy(
        update={"acceptance": healthy.acceptance.model_copy(update={"depth_probs": []})}
    )
    first = start_twin_server(healthy)
    url, port = first.url, first.port
    cmd = [
        sys.executable, "-m", "specscope.cli", "watch", url, "--probe-every", "0.5",
        "--interval", "1", "--warmup", "5", "--duration", "30", "--json",
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    second = None
    try:
        time.sleep(12)
        first.stop()
        time.sleep(3)
        back = time.time()
        second = start_twin_server(plain, port=port)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)  # no child left behind for a later test of this worker to find
        if second is not None:
            second.stop()
    assert proc.returncode == 0, err[-2000:]
    events = [json.loads(line) for line in out.splitlines()]
    errors = [e for e in events if e["event"] == "error"]
    assert errors and all(e["source"] == "canary" for e in errors)
    alerts = [e for e in events if e["event"] == "alert"]
    assert [a["factor"] for a in alerts] == ["speculation_off"], alerts
    assert back <= alerts[0]["since"] <= alerts[0]["t"] <= back + 10
    assert alerts[0]["cause"] is None and alerts[0]["ratio"] < 0.3
    late = [e for e in events if e["event"] == "window" and e["start"] > back + 3 and e["canaries"]]
    assert late and all(w["speculation"] == "off" for w in late)
