"""Misbehaving servers: every failure becomes a recorded error of the right kind, the run goes
on, the CLI exits 1, and nothing raises."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from specscope.cli import app
from specscope.probe.client import ProbeClient, Timeouts
from specscope.probe.flavors import make_flavor
from specscope.trace import load_run
from specscope.trace.model import RequestSpec
from support.loopback import FAULTS, LoopbackServer, fault_app, free_port

runner = CliRunner()

FAST = Timeouts(connect=2.0, first_byte=0.5, between_chunks=0.5, total=5.0)
# for the faults that are no timeout: a loopback answer can take over 0.5 s on a loaded machine
# (a 400 recorded as a first-byte timeout beside two busy processes)
PATIENT = Timeouts(connect=10.0, first_byte=10.0, between_chunks=10.0, total=30.0)

EXPECTED_KIND = {
    "http_500": "http_status",
    "empty": "empty_body",
    "no_done": "missing_done",
    "truncated": "stream_truncated",
    "cut": "stream_truncated",
    "bad_json": "malformed_json",
    "not_sse": "malformed_sse",
    "hang_first": "timeout_first_byte",
    "stall": "timeout_between_chunks",
    "server_error_event": "server_error",
}


async def _send(url: str, timeouts: Timeouts = FAST):
    flavor = make_flavor("vllm", model="test-model")
    async with ProbeClient(url, flavor, timeouts=timeouts) as client:
        return await client.send(RequestSpec(prompt="hi", max_tokens=4))


@pytest.mark.parametrize("mode", FAULTS)
def test_fault_becomes_recorded_error(mode):
    timed = EXPECTED_KIND[mode].startswith("timeout")
    with LoopbackServer(fault_app(mode, hang_s=3.0)) as srv:
        trace = asyncio.run(_send(srv.url, FAST if timed else PATIENT))
    assert trace.error is not None, mode
    assert trace.error.kind == EXPECTED_KIND[mode], trace.error
    assert trace.error.message
    assert trace.t_end_ns is not None and trace.t_end_ns >= trace.t_send_ns
    if mode == "http_500":
        assert trace.error.http_status == 500
        assert "out of KV cache" in trace.error.message
    if mode in ("no_done", "truncated", "bad_json", "stall", "server_error_event"):
        assert trace.tokens_received >= 1  # what arrived before the failure is kept


def test_connection_refused():
    trace = asyncio.run(_send(f"http://127.0.0.1:{free_port()}"))
    assert trace.error is not None and trace.error.kind == "connection"


def test_total_timeout():
    t = Timeouts(connect=2.0, first_byte=5.0, between_chunks=5.0, total=0.4)
    with LoopbackServer(fault_app("stall", hang_s=3.0)) as srv:
        trace = asyncio.run(_send(srv.url, t))
    assert trace.error is not None and trace.error.kind == "timeout_total"


def test_http_400_on_every_rung_is_recorded_once_all_rungs_fail():
    from aiohttp import web

    async def reject(_):
        return web.json_response({"error": {"message": "nope"}}, status=400)

    a = web.Application()
    a.router.add_post("/v1/completions", reject)
    with LoopbackServer(a) as srv:
        trace = asyncio.run(_send(srv.url, PATIENT))
        n_posts = len(srv.posts("/v1/completions"))
    assert trace.error is not None and trace.error.http_status == 400
    assert n_posts == make_flavor("vllm").n_variants


@pytest.mark.parametrize("mode", ["http_500", "stall", "cut"])
def test_cli_records_failures_continues_and_exits_1(tmp_path, mode):
    # Every second request fails: the run continues, failures are recorded, exit code 1.
    with LoopbackServer(fault_app(mode, fail_every=2, hang_s=2.0)) as srv:
        res = runner.invoke(
            app,
            [
                "probe",
                srv.url,
                "--json",
                "--out",
                str(tmp_path / "run"),
                "--prompt-tokens",
                "4",
                "--max-tokens",
                "5",
                "--repeat",
                "4",
                "--timeout-between-chunks",
                "0.5",
                "--flavor",
                "vllm",
            ],
        )
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    out = json.loads(res.stdout)
    s = out["summary"]
    assert s["requests"] == 4 and s["errors"] == 2
    assert s["error_kinds"] == {EXPECTED_KIND[mode]: 2}
    assert s["decode_tps"] is not None  # the two good requests are still measured
    run = load_run(tmp_path / "run")
    assert len(run.requests) == 4 and len(run.errors) == 2
    assert run.info.status == "complete" and "2 of 4" in run.info.status_reason


def test_interrupted_workload_hands_over_in_flight_requests():
    from specscope.probe.workload import run_workload

    seen = []

    async def go(url):
        flavor = make_flavor("vllm", model="test-model")
        async with ProbeClient(url, flavor, timeouts=Timeouts(between_chunks=10.0)) as client:
            specs = [RequestSpec(prompt="hi", max_tokens=4) for _ in range(4)]
            task = asyncio.create_task(run_workload(client, specs, 2, seen.append))
            await asyncio.sleep(0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    with LoopbackServer(fault_app("stall", hang_s=3.0)) as srv:
        asyncio.run(go(srv.url))
    # Both in-flight requests are recorded, cancelled, with the chunk they had received.
    assert sorted(t.index for t in seen) == [0, 1]
    assert all(t.error.kind == "cancelled" and t.tokens_received == 1 for t in seen)
