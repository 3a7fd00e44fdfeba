"""A hostile server, byte by byte: rich markup in its errors, lone surrogates, a line that never
ends, impossible token counts, credentials in the URL. Every case ends in a recorded error or a
clear line, the right exit code, no traceback, no record lost, no secret written."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from typer.testing import CliRunner

from specscope.cli import app
from specscope.probe.client import ProbeClient, Timeouts
from specscope.probe.flavors import make_flavor
from specscope.probe.sse import MAX_LINE_BYTES
from specscope.trace import load_run
from specscope.trace.model import RequestSpec
from support.loopback import LoopbackServer, models_handler, sse, tokenize_handler

runner = CliRunner()
FAST = Timeouts(connect=2.0, first_byte=5.0, between_chunks=5.0, total=20.0)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _app(
    completions: Handler, *, models: Handler | None = None, tokenize: Handler | None = None
) -> web.Application:
    a = web.Application()
    a.router.add_get("/v1/models", models or models_handler("vllm"))
    a.router.add_get("/version", lambda _: web.json_response({"version": "0.28.0"}))
    a.router.add_post("/tokenize", tokenize or tokenize_handler)
    a.router.add_post("/v1/completions", completions)
    return a


async def _start(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    return resp


def _chunk(text: str, ct: int, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "r",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
        "usage": {"prompt_tokens": 3, "completion_tokens": ct, "total_tokens": 3 + ct},
        **extra,
    }


def _stream_of(chunks: list[bytes]) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = await _start(request)
        for c in chunks:
            await resp.write(c)
        return resp

    return handler


def _probe(url: str, out: Path, *extra: str) -> Any:
    return runner.invoke(
        app,
        [
            "probe",
            url,
            "--json",
            "--out",
            str(out),
            "--flavor",
            "vllm",
            "--prompt-tokens",
            "4",
            "--max-tokens",
            "4",
            "--timeout-between-chunks",
            "5",
            *extra,
        ],
    )


def _no_traceback(res: Any) -> None:
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output and "Traceback" not in res.stderr


# -- rich markup in server text ------------------------------------------------------------

MARKUP = "boom [/red] [bold]x[/] [/x]"


@pytest.mark.parametrize("where", ["http_500", "in_stream"])
def test_markup_in_server_errors_is_printed_as_text(tmp_path, where):
    async def fail(request: web.Request) -> web.StreamResponse:
        await request.read()
        if where == "http_500":
            return web.Response(status=500, text=MARKUP)
        resp = await _start(request)
        await resp.write(sse(_chunk(" a", 1)))
        await resp.write(sse({"error": {"message": MARKUP}}))
        return resp

    with LoopbackServer(_app(fail)) as srv:
        res = _probe(srv.url, tmp_path / "run")
        table = runner.invoke(
            app,
            [
                "probe",
                srv.url,
                "--out",
                str(tmp_path / "run2"),
                "--flavor",
                "vllm",
                "--prompt-tokens",
                "4",
                "--max-tokens",
                "4",
            ],
        )
    for r in (res, table):
        _no_traceback(r)
        assert r.exit_code == 1, r.output
    assert MARKUP in table.stderr  # the terminal view shows the server's words, literally
    assert MARKUP in json.loads(res.stdout)["failed_requests"][0]["message"]


def test_markup_in_a_path_is_printed_as_text(tmp_path):
    odd = tmp_path / "[/x] [bold]" / "prompt.txt"
    res = runner.invoke(app, ["probe", "http://127.0.0.1:9", "--prompt-file", str(odd)])
    _no_traceback(res)
    assert res.exit_code == 2
    assert str(odd) in res.stderr


# -- lone surrogates -------------------------------------------------------------------------


def test_lone_surrogates_in_text_id_error_and_model_are_kept(tmp_path):
    lone = '"\\ud83d"'  # JSON-escaped lone surrogate, as a server may send it

    async def models(_: web.Request) -> web.Response:
        body = '{"object": "list", "data": [{"id": "m' + lone[1:-1] + '", "owned_by": "vllm"}]}'
        return web.Response(text=body, content_type="application/json")

    def raw(text: str, ct: int, finish: str = "null", rid: str = '"r"') -> bytes:
        return (
            b'data: {"id": '
            + rid.encode()
            + b', "choices": [{"index": 0, "text": '
            + text.encode()
            + b', "finish_reason": '
            + finish.encode()
            + b'}], "usage": '
            b'{"prompt_tokens": 3, "completion_tokens": ' + str(ct).encode() + b"}}\n\n"
        )

    ok = _stream_of([raw(lone, 1, rid=lone), raw('" b"', 2, '"length"'), sse(b"[DONE]")])
    with LoopbackServer(_app(ok, models=models)) as srv:
        res = _probe(srv.url, tmp_path / "run", "--flavor", "auto")
    _no_traceback(res)
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "run")  # readable: run.json and the record both survived
    assert run.info.model == "m\\ud83d"
    (req,) = run.requests
    assert req.text == "\\ud83d b" and req.request_id == "\\ud83d"

    bad = _stream_of(
        [raw('" a"', 1), b'data: {"error": {"message": "bad ' + lone[1:-1].encode() + b'"}}\n\n']
    )
    with LoopbackServer(_app(bad)) as srv:
        res = _probe(srv.url, tmp_path / "run2")
    _no_traceback(res)
    assert res.exit_code == 1
    (req,) = load_run(tmp_path / "run2").requests
    assert req.error is not None and "bad \\ud83d" in req.error.message


# -- a line that never ends --------------------------------------------------------------------


def test_a_stream_line_that_never_ends_is_bounded_and_recorded():
    sent = {"bytes": 0}

    async def endless(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = await _start(request)
        await resp.write(b"data: " + b"x" * 1000)
        piece = b"y" * (256 << 10)
        try:
            for _ in range(4 * MAX_LINE_BYTES // len(piece)):  # 4x the bound, then give up
                await resp.write(piece)
                sent["bytes"] += len(piece)
        except (ConnectionResetError, RuntimeError):
            pass
        return resp

    async def go(url: str) -> Any:
        async with ProbeClient(url, make_flavor("vllm", model="m"), timeouts=FAST) as client:
            return await client.send(RequestSpec(prompt="hi", max_tokens=4))

    with LoopbackServer(_app(endless)) as srv:
        trace = asyncio.run(go(srv.url))
    assert trace.error is not None and trace.error.kind == "line_too_long", trace.error
    assert str(MAX_LINE_BYTES) in trace.error.message
    assert sent["bytes"] < 3 * MAX_LINE_BYTES  # the client stopped reading: memory bounded


# -- impossible numbers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "counts,expect",
    [
        ([1, 3, 2], "went backwards: 3 then 2"),
        ([1, -5], "= -5 (negative)"),
        ([1, 10**12], "one event reported 999999999999 tokens"),
    ],
)
def test_impossible_usage_counts_are_errors_keeping_the_raw_value(tmp_path, counts, expect):
    chunks = [
        sse(_chunk(" t", ct, "length" if i == len(counts) - 1 else None))
        for i, ct in enumerate(counts)
    ] + [sse(b"[DONE]")]
    with LoopbackServer(_app(_stream_of(chunks))) as srv:
        res = _probe(srv.url, tmp_path / "run")
    _no_traceback(res)
    assert res.exit_code == 1, res.output
    out = json.loads(res.stdout)
    assert out["summary"]["decode_tps"] is None  # no absurd rate from an impossible count
    (failed,) = out["failed_requests"]
    assert failed["kind"] == "impossible_count" and expect in failed["message"]
    (req,) = load_run(tmp_path / "run").requests
    assert req.completion_tokens == counts[-1]  # the raw value is kept on the record


def test_negative_prompt_tokens_reported_is_an_error(tmp_path):
    chunks = [
        sse({**_chunk(" t", 1), "usage": {"prompt_tokens": -63, "completion_tokens": 1}}),
        sse(_chunk(" t", 2, "length")),
        sse(b"[DONE]"),
    ]
    chunks[1] = sse(
        {**_chunk(" t", 2, "length"), "usage": {"prompt_tokens": -63, "completion_tokens": 2}}
    )
    with LoopbackServer(_app(_stream_of(chunks))) as srv:
        res = _probe(srv.url, tmp_path / "run")
    assert res.exit_code == 1
    (failed,) = json.loads(res.stdout)["failed_requests"]
    assert failed["kind"] == "impossible_count" and "-63" in failed["message"]


@pytest.mark.parametrize("count", [-63, 10**30])
def test_tokenize_nonsense_is_a_clear_line_and_exit_1(tmp_path, count):
    async def tokenize(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"count": count, "tokens": []})

    ok = _stream_of([sse(_chunk(" t", 1, "length")), sse(b"[DONE]")])
    with LoopbackServer(_app(ok, tokenize=tokenize)) as srv:
        res = _probe(srv.url, tmp_path / "run")
    _no_traceback(res)
    assert res.exit_code == 1, res.output
    assert str(count) in res.stderr and "impossible" in res.stderr


# -- credentials in the URL ----------------------------------------------------------------------


def test_url_credentials_are_sent_as_basic_auth_and_never_written(tmp_path):
    ok = _stream_of([sse(_chunk(" t", 1)), sse(_chunk(" t", 2, "length")), sse(b"[DONE]")])
    with LoopbackServer(_app(ok)) as srv:
        url = srv.url.replace("http://", "http://user:SECRET@")
        res = _probe(url, tmp_path / "run")
        table = runner.invoke(
            app,
            [
                "probe",
                url,
                "--out",
                str(tmp_path / "run2"),
                "--flavor",
                "vllm",
                "--prompt-tokens",
                "4",
                "--max-tokens",
                "4",
            ],
        )
        auth = [h.get("Authorization") for h in srv.headers]
    assert res.exit_code == 0 and table.exit_code == 0, res.output
    assert auth and all(a == "Basic " + base64.b64encode(b"user:SECRET").decode() for a in auth)
    for r in (res, table):
        assert "SECRET" not in r.stdout + r.stderr
    for run in ("run", "run2"):
        for f in (tmp_path / run).iterdir():
            assert "SECRET" not in f.read_text(), f
    assert load_run(tmp_path / "run").info.endpoint == srv.url


@pytest.mark.parametrize("url", ["http://[", "not a url", "http://h:99999", "http://u:SECRET@[::1"])
def test_bad_urls_are_exit_2(url):
    for cmd in (["probe", url], ["diagnose", url]):
        res = runner.invoke(app, cmd)
        _no_traceback(res)
        assert res.exit_code == 2, (cmd, res.output)
        assert "SECRET" not in res.stderr


# -- --prompt-tokens bounded ---------------------------------------------------------------------


def test_prompt_tokens_beyond_the_cap_or_the_servers_context_is_exit_2(tmp_path):
    res = runner.invoke(app, ["probe", "http://127.0.0.1:9", "--prompt-tokens", "100000000"])
    assert res.exit_code == 2 and "--prompt-tokens" in res.stderr

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 512}]})

    ok = _stream_of([sse(_chunk(" t", 1, "length")), sse(b"[DONE]")])
    with LoopbackServer(_app(ok, models=models)) as srv:
        res = runner.invoke(
            app, ["probe", srv.url, "--prompt-tokens", "1000", "--out", str(tmp_path / "run")]
        )
        assert not srv.posts("/v1/completions")
    _no_traceback(res)
    assert res.exit_code == 2 and "context of 512" in res.stderr
