"""Loopback servers that replay each flavor's wire format (reference/observability.md) on a known
schedule, for the probe tests. Real aiohttp.web servers on 127.0.0.1 in a background thread, so
the CLI under test (which runs its own event loop) talks real HTTP to them.

Schedules are relative (first chunk after `ttft_s`, then `step_s` of sleep before each next
chunk), so every gap is at least one step: a loaded machine can only make the measured rate
lower, never higher, and a late wake-up never bunches two chunks into one read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

# ---------------------------------------------------------------------------------------------
# Server harness


class LoopbackServer:
    """Runs an aiohttp app on 127.0.0.1:<free port> in a thread; records request bodies."""

    def __init__(self, app: web.Application):
        self.app = app
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        self.headers: list[dict[str, str]] = []
        app.middlewares.append(self._record)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @web.middleware
    async def _record(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        if request.method == "POST":
            try:
                body = await request.json()
            except (ValueError, UnicodeDecodeError):
                body = {}
            self.bodies.append((request.path, body))
        self.headers.append(dict(request.headers))
        return await handler(request)

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
            with contextlib.suppress(Exception):
                fut.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def posts(self, path: str) -> list[dict[str, Any]]:
        return [b for p, b in self.bodies if p == path]


def free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# Schedules and tokenizer


@dataclass
class Schedule:
    """First token after `ttft_s`, then one verify step every `step_s` committing `commits[i]`."""

    ttft_s: float = 0.05
    step_s: float = 0.04
    commits: list[int] = field(default_factory=lambda: [3, 2, 4, 1, 3, 4, 2, 3] * 2)
    max_drafts: int = 3  # commit length <= max_drafts + 1

    @property
    def completion_tokens(self) -> int:
        return 1 + sum(self.commits)

    @property
    def decode_tps(self) -> float:
        return sum(self.commits) / (len(self.commits) * self.step_s)

    @property
    def mean_commit(self) -> float:
        return sum(self.commits) / len(self.commits)

    def for_max_tokens(self, max_tokens: int) -> Schedule:
        """The schedule truncated to `max_tokens` (the last step may commit fewer)."""
        out, total = [], 1
        for c in self.commits:
            if total >= max_tokens:
                break
            c = min(c, max_tokens - total)
            out.append(c)
            total += c
        return Schedule(self.ttft_s, self.step_s, out, self.max_drafts)


def word_tokens(text: str) -> list[int]:
    """The fake servers' tokenizer: one token per whitespace word, "village" counts two."""
    ids: list[int] = []
    for w in text.split():
        ids.append(len(w))
        if w == "village":
            ids.append(0)
    return ids


def sse(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


async def _stream_start(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    return resp


async def tokenize_handler(request: web.Request) -> web.Response:
    body = await request.json()
    if "prompt" not in body:
        return web.json_response({"error": "missing prompt"}, status=400)
    toks = word_tokens(body["prompt"])
    return web.json_response({"tokens": toks, "count": len(toks), "max_model_len": 4096})


def models_handler(owner: str) -> Callable:
    async def handler(_: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": "test-model", "object": "model", "owned_by": owner}]}
        )

    return handler


def _max_tokens(body: dict[str, Any]) -> int:
    for k in ("max_tokens", "n_predict"):
        if isinstance(body.get(k), int):
            return body[k]
    return body.get("sampling_params", {}).get("max_new_tokens", 16)


# ---------------------------------------------------------------------------------------------
# SGLang: /get_server_info, /generate (meta_info cumulative, spec fields on the final chunk)


def sglang_app(sched: Schedule, *, old_names: bool = False) -> web.Application:
    async def generate(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        s = sched.for_max_tokens(_max_tokens(body))
        prompt = len(word_tokens(body.get("text", "")))
        resp = await _stream_start(request)
        t0 = time.perf_counter()
        text, ct = "", 0
        sizes = [1, *s.commits]
        for i, n in enumerate(sizes):
            await asyncio.sleep(s.ttft_s if i == 0 else s.step_s)
            ct += n
            text += " tok" * n
            last = i == len(sizes) - 1
            meta: dict[str, Any] = {
                "id": "req-1",
                "prompt_tokens": prompt,
                "completion_tokens": ct,
                "cached_tokens": 0,
                "finish_reason": {"type": "length", "length": ct} if last else None,
            }
            if last:
                verify = len(s.commits)
                correct = sum(c - 1 for c in s.commits)
                hist = [0] * (s.max_drafts + 1)
                for c in s.commits:
                    hist[c - 1] += 1
                meta["e2e_latency"] = time.perf_counter() - t0
                meta["spec_verify_ct"] = verify
                meta["spec_accept_length"] = ct / verify
                if old_names:
                    meta["spec_accept_token_num"] = correct
                    meta["spec_draft_token_num"] = verify * s.max_drafts
                    meta["spec_accept_histogram"] = hist
                else:
                    meta["spec_accept_rate"] = correct / (verify * s.max_drafts)
                    meta["spec_num_correct_drafts"] = correct
                    meta["spec_num_proposed_drafts"] = verify * s.max_drafts
                    meta["spec_correct_drafts_histogram"] = hist
                    meta["spec_accepted_drafts"] = correct  # backward-compat alias
                    meta["spec_accept_histogram"] = hist
            await resp.write(sse({"text": text, "output_ids": [], "meta_info": meta}))
        await resp.write(sse(b"[DONE]"))
        return resp

    async def server_info(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "speculative_algorithm": "EAGLE",
                "internal_states": [{"avg_spec_accept_length": 2.8, "last_gen_throughput": 70.0}],
            }
        )

    app = web.Application()
    app.router.add_get("/get_server_info", server_info)
    app.router.add_get("/v1/models", models_handler("sglang"))
    app.router.add_post("/tokenize", tokenize_handler)
    app.router.add_post("/generate", generate)
    return app


# ---------------------------------------------------------------------------------------------
# vLLM / OpenAI: /v1/completions and /v1/chat/completions with continuous usage and
# metrics.speculative_decoding on the final usage chunk.


def openai_app(
    sched: Schedule,
    *,
    owner: str = "vllm",
    spec_metrics: str | None = "detailed",
    reject_stream_options: bool = False,
    tokenize: bool = True,
    version: bool = True,
) -> web.Application:
    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if reject_stream_options and "stream_options" in body:
            return web.json_response(
                {
                    "error": {
                        "message": "stream_options: extra fields not permitted",
                        "type": "invalid_request_error",
                    }
                },
                status=400,
            )
        chat = request.path.endswith("/chat/completions")
        s = sched.for_max_tokens(_max_tokens(body))
        so = body.get("stream_options") or {}
        include_usage = bool(so.get("include_usage"))
        continuous = include_usage and bool(so.get("continuous_usage_stats"))
        logprobs = bool(body.get("logprobs"))
        prompt_text = body["messages"][-1]["content"] if chat else body.get("prompt", "")
        prompt = len(word_tokens(prompt_text))
        resp = await _stream_start(request)
        base = {
            "id": "cmpl-1",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": 1,
            "model": "test-model",
        }
        if chat:
            await resp.write(
                sse(
                    {
                        **base,
                        "choices": [
                            {
                                "index": 0,
                                "delta": {"role": "assistant", "content": ""},
                                "logprobs": None,
                                "finish_reason": None,
                            }
                        ],
                    }
                )
            )
        sizes = [1, *s.commits]
        ct = 0
        for i, n in enumerate(sizes):
            await asyncio.sleep(s.ttft_s if i == 0 else s.step_s)
            ct += n
            piece = " tok" * n
            finish = "length" if i == len(sizes) - 1 else None
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if chat:
                choice["delta"] = {"content": piece}
                choice["logprobs"] = (
                    {"content": [{"token": " tok", "logprob": -0.1}] * n} if logprobs else None
                )
            else:
                choice["text"] = piece
                choice["logprobs"] = (
                    {"tokens": [" tok"] * n, "token_logprobs": [-0.1] * n} if logprobs else None
                )
                choice["stop_reason"] = None
            chunk: dict[str, Any] = {**base, "choices": [choice]}
            if continuous:
                chunk["usage"] = {
                    "prompt_tokens": prompt,
                    "completion_tokens": ct,
                    "total_tokens": prompt + ct,
                }
            await resp.write(sse(chunk))
        if include_usage:
            final: dict[str, Any] = {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": ct,
                    "total_tokens": prompt + ct,
                },
            }
            if spec_metrics:
                steps = len(s.commits)
                acc = [c - 1 for c in s.commits]
                hist = [0] * (s.max_drafts + 1)
                for a in acc:
                    hist[a] += 1
                sd: dict[str, Any] = {
                    "mean_acceptance_length": 1 + sum(acc) / steps,
                    "draft_acceptance_rate": sum(acc) / (steps * s.max_drafts),
                    "acceptance_histogram": hist,
                    "num_spec_steps": steps,
                    "num_accepted_draft_tokens": sum(acc),
                    "num_draft_tokens": steps * s.max_drafts,
                    "num_spec_tokens": s.max_drafts,
                }
                if spec_metrics == "detailed":
                    sd["per_step_accepted"] = acc
                    sd["per_step_drafted"] = [s.max_drafts] * steps
                final["metrics"] = {"speculative_decoding": sd}
            await resp.write(sse(final))
        await resp.write(sse(b"[DONE]"))
        return resp

    async def version_h(_: web.Request) -> web.Response:
        return web.json_response({"version": "0.28.0"})

    app = web.Application()
    app.router.add_get("/v1/models", models_handler(owner))
    if version:
        app.router.add_get("/version", version_h)
    if tokenize:
        app.router.add_post("/tokenize", tokenize_handler)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", completions)
    return app


# ---------------------------------------------------------------------------------------------
# llama.cpp: /props, /tokenize {"content"}, /completion with one event per token (bursts).


def llamacpp_app(sched: Schedule, *, intra_burst_s: float = 0.001) -> web.Application:
    async def completion(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        s = sched.for_max_tokens(_max_tokens(body))
        prompt = len(word_tokens(body.get("prompt", "")))
        resp = await _stream_start(request)
        sizes = [1, *s.commits]
        k = 0
        for i, n in enumerate(sizes):
            await asyncio.sleep(s.ttft_s if i == 0 else s.step_s)
            for j in range(n):
                if j:
                    await asyncio.sleep(intra_burst_s)
                k += 1
                await resp.write(
                    sse(
                        {
                            "index": 0,
                            "content": " tok",
                            "tokens": [42],
                            "stop": False,
                            "id_slot": 0,
                            "tokens_predicted": k,
                            "tokens_evaluated": prompt,
                        }
                    )
                )
        drafted = len(s.commits) * s.max_drafts
        accepted = sum(c - 1 for c in s.commits)
        await resp.write(
            sse(
                {
                    "index": 0,
                    "content": "",
                    "tokens": [],
                    "id_slot": 0,
                    "stop": True,
                    "model": "test-model",
                    "tokens_predicted": k,
                    "tokens_evaluated": prompt,
                    "stop_type": "limit",
                    "timings": {
                        "prompt_n": prompt,
                        "prompt_ms": 5.0,
                        "predicted_n": k,
                        "predicted_ms": 100.0,
                        "draft_n": drafted,
                        "draft_n_accepted": accepted,
                    },
                }
            )
        )
        return resp

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        if "content" not in body:
            return web.json_response({"error": "content missing"}, status=400)
        return web.json_response({"tokens": word_tokens(body["content"])})

    async def props(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "default_generation_settings": {"n_ctx": 4096},
                "total_slots": 1,
                "build_info": "b9999-test",
            }
        )

    app = web.Application()
    app.router.add_get("/props", props)
    app.router.add_get("/v1/models", models_handler("llamacpp"))
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/completion", completion)
    return app


# ---------------------------------------------------------------------------------------------
# Misbehaving servers: one failure mode per app, optionally only for some request numbers.

FAULTS = (
    "http_500",
    "empty",
    "no_done",
    "truncated",
    "cut",
    "bad_json",
    "not_sse",
    "hang_first",
    "stall",
    "server_error_event",
)


def fault_app(mode: str, *, fail_every: int = 1, hang_s: float = 5.0) -> web.Application:
    """`/v1/completions` that misbehaves as `mode` on requests whose number % fail_every == 0
    (numbered from 0) and answers properly otherwise."""
    counter = {"n": 0}
    good = Schedule(ttft_s=0.01, step_s=0.01, commits=[2, 2])

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n = counter["n"]
        counter["n"] += 1
        if n % fail_every != 0:
            return await _good(request, body, good)
        if mode == "http_500":
            return web.Response(status=500, text="internal boom: out of KV cache")
        if mode == "not_sse":
            return web.json_response({"text": "hello", "note": "stream ignored"})
        if mode == "hang_first":
            await asyncio.sleep(hang_s)
            return web.Response(text="late")
        resp = await _stream_start(request)
        chunk = {
            "id": "x",
            "choices": [{"index": 0, "text": " a", "finish_reason": None}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        }
        if mode == "empty":
            await resp.write_eof()
            return resp
        if mode == "bad_json":
            await resp.write(sse(chunk))
            await resp.write(b'data: {"choices": [oops\n\n')
            await resp.write(sse(b"[DONE]"))
            return resp
        if mode == "server_error_event":
            await resp.write(sse(chunk))
            await resp.write(sse({"error": {"message": "engine died", "code": 500}}))
            return resp
        await resp.write(sse(chunk))
        if mode == "truncated":
            return resp  # ends cleanly without finish or [DONE]
        if mode == "no_done":
            done = {
                "id": "x",
                "choices": [{"index": 0, "text": " b", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            }
            await resp.write(sse(done))
            return resp
        if mode == "stall":
            await asyncio.sleep(hang_s)
            return resp
        if mode == "cut":
            await asyncio.sleep(0.05)
            request.transport.close()  # type: ignore[union-attr]  # mid-chunked-encoding
            return resp
        raise AssertionError(mode)

    app = web.Application()
    app.router.add_get("/v1/models", models_handler("vllm"))
    app.router.add_get("/version", lambda _: web.json_response({"version": "0.28.0"}))
    app.router.add_post("/tokenize", tokenize_handler)
    app.router.add_post("/v1/completions", completions)
    return app


async def _good(request: web.Request, body: dict[str, Any], s: Schedule) -> web.StreamResponse:
    resp = await _stream_start(request)
    ct = 0
    for i, n in enumerate([1, *s.commits]):
        await asyncio.sleep(s.step_s)
        ct += n
        last = i == len(s.commits)
        await resp.write(
            sse(
                {
                    "id": "ok",
                    "choices": [
                        {"index": 0, "text": " t" * n, "finish_reason": "length" if last else None}
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": ct, "total_tokens": 3 + ct},
                }
            )
        )
    await resp.write(sse(b"[DONE]"))
    return resp


# ---------------------------------------------------------------------------------------------
# A server that, like llama.cpp's, serves ONE request per TCP connection and then closes it
# without a `Connection: close` header. Raw asyncio (not aiohttp.web, which would announce the
# close and so never trip a pooling client): after each response it waits for whatever the
# client sends next on that connection and closes without answering, which deterministically
# reproduces "server closed the connection before responding" for a client that pools.


class OneShotConnectionServer:
    """llama.cpp-flavoured `/v1/models`, `/props`, `/tokenize`, `/completion` on 127.0.0.1;
    counts connections, answered requests and requests sent on an already-used connection."""

    def __init__(self, sched: Schedule | None = None, *, linger_s: float = 2.0):
        self.sched = sched or Schedule(ttft_s=0.01, step_s=0.005, commits=[2, 1, 3])
        self.linger_s = linger_s
        self.connections = 0
        self.answered: list[str] = []
        self.reused = 0  # requests that arrived on a connection that had already been answered
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def __enter__(self) -> OneShotConnectionServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            async with asyncio.timeout(10):
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
                length = 0
                for line in head.decode().split("\r\n")[1:]:
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                body = json.loads(await reader.readexactly(length)) if length else {}
                await self._respond(writer, method, path, body)
            # One request per connection: a client that pools sends its next request here.
            with contextlib.suppress(TimeoutError, ConnectionError):
                async with asyncio.timeout(self.linger_s):
                    if await reader.read(1):
                        self.reused += 1
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _respond(
        self, writer: asyncio.StreamWriter, method: str, path: str, body: dict[str, Any]
    ) -> None:
        if path == "/completion" and method == "POST":
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            s = self.sched.for_max_tokens(_max_tokens(body))
            k = 0
            for i, n in enumerate([1, *s.commits]):
                await asyncio.sleep(s.ttft_s if i == 0 else s.step_s)
                k += n
                ev = sse(
                    {
                        "index": 0,
                        "content": " tok" * n,
                        "tokens": [42] * n,
                        "stop": False,
                        "tokens_predicted": k,
                    }
                )
                writer.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                await writer.drain()
            ev = sse(
                {
                    "index": 0,
                    "content": "",
                    "stop": True,
                    "stop_type": "limit",
                    "tokens_predicted": k,
                    "timings": {"predicted_n": k},
                }
            )
            self.answered.append(path)  # before the last bytes: the client may return on them
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(ev), ev))
            await writer.drain()
            return
        answers: dict[str, Any] = {
            "/v1/models": {
                "object": "list",
                "data": [{"id": "test-model", "owned_by": "llamacpp"}],
            },
            "/props": {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1},
        }
        if path == "/tokenize" and method == "POST":
            obj: Any = {"tokens": word_tokens(str(body.get("content", "")))}
        else:
            obj = answers.get(path)
        status = b"200 OK" if obj is not None else b"404 Not Found"
        raw = json.dumps(obj if obj is not None else {"error": "not found"}).encode()
        self.answered.append(path)
        writer.write(
            b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status, len(raw), raw)
        )
        await writer.drain()
