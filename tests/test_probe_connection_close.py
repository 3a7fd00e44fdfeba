"""A server that closes the connection after every response (llama.cpp's does, without a
`Connection: close` header): every request of a run, and the /tokenize calls that build the
prompt, must still succeed. With a pooling client the second request went out on the dropped
connection and failed with "server closed the connection before responding"."""

from __future__ import annotations

import asyncio
import json

from typer.testing import CliRunner

from specscope.cli import app
from specscope.probe.client import ProbeClient, Timeouts, new_session
from specscope.probe.flavors import make_flavor
from specscope.probe.prompts import server_counter
from specscope.probe.workloads import PromptSource, resolve_workload
from specscope.trace.model import RequestSpec
from support.loopback import OneShotConnectionServer

runner = CliRunner()
TIMEOUTS = Timeouts(connect=5.0, first_byte=10.0, between_chunks=10.0, total=30.0)


async def _three_requests(url: str) -> list:
    flavor = make_flavor("llamacpp", model="test-model")
    async with ProbeClient(url, flavor, timeouts=TIMEOUTS) as client:
        return [
            await client.send(RequestSpec(prompt="hi", max_tokens=7), index=i) for i in range(3)
        ]


def test_back_to_back_requests_each_get_a_fresh_connection():
    with OneShotConnectionServer() as srv:
        traces = asyncio.run(_three_requests(srv.url))
        answered, reused, conns = list(srv.answered), srv.reused, srv.connections
    assert [t.error for t in traces] == [None, None, None]
    assert [t.tokens_received for t in traces] == [7, 7, 7]
    assert answered == ["/completion"] * 3
    assert reused == 0  # no request was ever sent on an already-answered connection
    assert conns == 3


async def _tokenize_then_generate(url: str) -> tuple[int, object]:
    async with new_session(TIMEOUTS) as session:
        found = await server_counter(session, url, (("/tokenize", "content"),))
        assert found is not None
        count, _ = found
        built = await PromptSource(count, resolve_workload("chat")).prompt(12, 0)
        flavor = make_flavor("llamacpp", model="test-model")
        async with ProbeClient(url, flavor, timeouts=TIMEOUTS, session=session) as client:
            trace = await client.send(RequestSpec(prompt=built.text, max_tokens=4))
    return built.tokens, trace


def test_tokenize_calls_and_the_request_share_a_session_without_reusing_dead_connections():
    with OneShotConnectionServer() as srv:
        n_tokens, trace = asyncio.run(_tokenize_then_generate(srv.url))
        reused = srv.reused
    assert n_tokens == 12
    assert trace.error is None and trace.tokens_received == 4
    assert reused == 0


def test_probe_cli_against_a_closing_server_records_no_errors(tmp_path):
    with OneShotConnectionServer() as srv:
        res = runner.invoke(
            app,
            [
                "probe",
                srv.url,
                "--json",
                "--out",
                str(tmp_path / "run"),
                "--prompt-tokens",
                "16",
                "--max-tokens",
                "6",
                "--repeat",
                "3",
            ],
        )
        reused = srv.reused
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["summary"]["requests"] == 3
    assert out["summary"]["errors"] == 0
    assert reused == 0
