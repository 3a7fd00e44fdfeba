"""Streams stay whole under load (issue #38): 64 concurrent streamed /generate requests against
the served engine (real SmolLM2 weights on CPU, short outputs), stepped by serve's step thread,
then by the engine's own process with its steps overlapped.

Each stream's text must be the detokenization of that request's own final token ids (the
server's record, `output_ids` on the final chunk): nothing lost, duplicated or reordered, and
no request's tokens in another's stream. SGLang's native stream carries the cumulative text,
so every chunk must extend the previous one and its completion_tokens count must grow.
"""

from __future__ import annotations

import asyncio
import functools
import json

import aiohttp
import pytest

from specscope.engine.factory import build_backend, build_served_backend
from specscope.serve.engine_process import EngineProcess
from specscope.serve.options import ServeOptions
from specscope.serve.runner import run_server

pytestmark = pytest.mark.engine

CONCURRENCY = 64
MAX_NEW = 12
ENGINE = {
    "model": "smollm2",
    "max_batch": CONCURRENCY,
    "kv_pool_tokens": CONCURRENCY * 64,
    "device": "cpu",
}


@pytest.fixture(scope="module")
def served():
    backend = build_backend(**ENGINE)
    opts = ServeOptions(log_to_stderr=False, max_batch=CONCURRENCY)
    handle = run_server(backend, opts, "127.0.0.1", 0)
    try:
        yield handle.url, backend
    finally:
        handle.stop()
        assert backend.kv.free_pages == backend.kv.num_pages  # every request gave its pages back


async def _stream(session: aiohttp.ClientSession, url: str, i: int) -> list[dict]:
    """One streamed request's chunks, in arrival order. Prompts differ, so streams differ."""
    body = {
        "input_ids": [1 + (i * 7 + k) % 4000 for k in range(8 + i % 5)],
        "sampling_params": {"max_new_tokens": MAX_NEW, "temperature": 0.0, "ignore_eos": True},
        "stream": True,
    }
    chunks = []
    async with session.post(f"{url}/generate", json=body) as resp:
        assert resp.status == 200
        async for raw in resp.content:
            line = raw.decode().strip()
            if line.startswith("data:") and line != "data: [DONE]":
                chunks.append(json.loads(line[5:]))
    return chunks


async def _all(url: str) -> list[list[dict]]:
    # what is tested is the text, not the speed: a stalled stream fails (180 s without a byte),
    # a slow machine does not (beside a loaded suite 64 streams once took over 100 s, and with
    # a vLLM peer beside it too a stream's first byte came after more than 60 s)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=180)
    conn = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(timeout=timeout, connector=conn) as session:
        return await asyncio.gather(*(_stream(session, url, i) for i in range(CONCURRENCY)))


@pytest.mark.timeout(900)
def test_streams_match_the_servers_token_record(served):
    url, backend = served
    _check_streams(asyncio.run(asyncio.wait_for(_all(url), 600)), backend.detokenize)


@pytest.mark.timeout(900)
def test_streams_match_through_the_engine_process():
    """The same 64 streams with the engine in a process of its own (what `specscope serve
    --backend engine` runs): one report per step crosses the pipe, the text is rendered here.
    Its steps overlap (engine/overlap.py), as they do by default on CUDA: each report then
    carries the step before the one just launched."""
    engine = EngineProcess(functools.partial(build_served_backend, **ENGINE, overlap=True))
    opts = ServeOptions(log_to_stderr=False, max_batch=CONCURRENCY)
    handle = run_server(engine, opts, "127.0.0.1", 0)
    try:
        assert engine.info.extra["overlap"] is True  # the child's steps overlap
        results = asyncio.run(asyncio.wait_for(_all(handle.url), 600))
        assert handle.app.state.ctx.scheduler.running == {}
    finally:
        handle.stop()
    _check_streams(results, engine.detokenize)


def _check_streams(results: list[list[dict]], detokenize) -> None:
    assert len(results) == CONCURRENCY
    outputs = set()
    for chunks in results:
        assert chunks, "a stream without a chunk"
        final = chunks[-1]
        ids = final["output_ids"]
        assert len(ids) == MAX_NEW == final["meta_info"]["completion_tokens"]
        assert final["text"] == detokenize(ids)
        previous, count = "", 0
        for chunk in chunks:
            assert chunk["text"].startswith(previous)  # cumulative: never rewritten or reordered
            assert chunk["meta_info"]["completion_tokens"] > count
            previous, count = chunk["text"], chunk["meta_info"]["completion_tokens"]
        assert "output_ids" not in chunks[0] or len(chunks) == 1
        outputs.add(tuple(ids))
    assert len(outputs) > 1  # distinct prompts: a mixed-up delivery would not hide as equal


async def _generate(url: str, n: int) -> tuple[int, dict]:
    body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": n, "ignore_eos": True}}
    timeout = aiohttp.ClientTimeout(total=60)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(f"{url}/generate", json=body) as resp,
    ):
        return resp.status, await resp.json()


def test_a_failing_step_fails_its_requests_not_the_server(served, monkeypatch):
    """The step thread catches what the engine raises: the request gets a 500, its pages come
    back, and the next request is served as usual."""
    url, backend = served
    real = backend.stepper.step
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the second step of the first request
            raise RuntimeError("injected")
        return real(*args, **kwargs)

    monkeypatch.setattr(backend.stepper, "step", broken)
    status, _ = asyncio.run(_generate(url, 4))
    assert status == 500
    assert len(calls) == 2
    status, body = asyncio.run(_generate(url, 4))
    assert status == 200 and len(body["output_ids"]) == 4
    assert backend.kv.free_pages == backend.kv.num_pages
