"""/v1/completions and /v1/chat/completions: SSE streaming (one chunk per emission) or full."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from specscope.serve import formatting as fmt
from specscope.serve.context import CLIENT_CLOSED, ServeContext
from specscope.serve.scheduler import RequestState, StepEvent
from specscope.serve.streaming import Emission, emissions, wait_or_disconnect
from specscope.serve.textstream import TextStream
from specscope.serve.validation import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    StreamOptions,
    parse_body,
)


def _prompt_ids(ctx: ServeContext, prompt: str | list[int] | list[str]) -> list[int]:
    if isinstance(prompt, str):
        return ctx.backend.tokenize(prompt)
    if all(isinstance(p, int) for p in prompt):
        return list(prompt)  # type: ignore[arg-type]
    if len(prompt) != 1:
        raise ApiError("prompt: only one prompt per request is supported", param="prompt")
    return ctx.backend.tokenize(str(prompt[0]))


async def _collect(ctx: ServeContext, state: RequestState, first: StepEvent) -> list[Emission]:
    return [em async for em in emissions(state, first, ctx.metrics)]


async def _full(
    ctx: ServeContext, request: Request, state: RequestState, first: StepEvent
) -> list[Emission] | Response:
    task = asyncio.ensure_future(_collect(ctx, state, first))
    try:
        ems = await wait_or_disconnect(task, request.is_disconnected)
    finally:
        ctx.scheduler.cancel(state.request_id)
    if ems is None:
        return Response(status_code=CLIENT_CLOSED)
    if ems and ems[-1].finish_reason == "abort":
        return JSONResponse(fmt.error_body_abort(), status_code=500)
    return ems


def _stream(
    ctx: ServeContext, state: RequestState, first: StepEvent, frames: AsyncIterator[str]
) -> StreamingResponse:
    async def body() -> AsyncIterator[str]:
        try:
            async for frame in frames:
                yield frame
        finally:  # the client left or the stream ended: free the request either way
            ctx.scheduler.cancel(state.request_id)

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _opts(so: StreamOptions | None) -> tuple[bool, bool]:
    if so is None:
        return False, False
    return so.include_usage, so.continuous_usage_stats


@dataclass(frozen=True)
class _Shape:
    """What differs between /v1/completions and /v1/chat/completions: ids, the body builders
    (full response, one streamed text delta, chat's opening role chunk) and the usage chunk's
    object name. Everything else (admission, streaming, usage, disconnects) is shared."""

    id_prefix: str
    usage_object: str
    full: Callable[..., dict[str, Any]]
    chunk: Callable[[str, int, str, str, str | None, dict[str, Any] | None], dict[str, Any]]
    opening: Callable[[str, int, str, dict[str, Any] | None], dict[str, Any]] | None = None


_COMPLETION = _Shape("cmpl-", "text_completion", fmt.completion_full, fmt.completion_chunk)
_CHAT = _Shape(
    "chatcmpl-",
    "chat.completion.chunk",
    fmt.chat_full,
    lambda rid, created, model, text, finish, u: fmt.chat_chunk(
        rid, created, model, {"content": text}, finish, u
    ),
    lambda rid, created, model, u: fmt.chat_chunk(
        rid, created, model, {"role": "assistant", "content": ""}, None, u
    ),
)


async def _respond(
    ctx: ServeContext,
    request: Request,
    shape: _Shape,
    rid: str,
    prompt_ids: list[int],
    params: Any,
    stream: bool,
    stream_options: StreamOptions | None,
) -> Response:
    started = await ctx.start(request, rid, prompt_ids, params)
    if isinstance(started, Response):
        return started
    state, first = started
    created, model, n_prompt = fmt.now_s(), ctx.model_name, len(prompt_ids)
    if not stream:
        ems = await _full(ctx, request, state, first)
        if isinstance(ems, Response):
            return ems
        text = ctx.backend.detokenize([t for e in ems for t in e.tokens])
        done = ems[-1].completion_tokens if ems else 0
        finish = ems[-1].finish_reason if ems else None
        return JSONResponse(
            shape.full(rid, created, model, text, finish, fmt.usage(n_prompt, done))
        )
    include_usage, continuous = _opts(stream_options)

    async def frames() -> AsyncIterator[str]:
        if shape.opening is not None:
            u0 = fmt.usage(n_prompt, 0) if continuous else None
            yield fmt.sse(shape.opening(rid, created, model, u0))
        done = 0
        text = TextStream(ctx.backend.detokenize)
        async for em in emissions(
            state, first, ctx.metrics, ctx.stream_interval, ctx.per_token_events
        ):
            if em.finish_reason == "abort":
                return  # simulated mid-stream disconnect: no final chunk, no [DONE]
            done = em.completion_tokens
            u = fmt.usage(n_prompt, done) if continuous else None
            yield fmt.sse(
                shape.chunk(
                    rid,
                    created,
                    model,
                    text.add(em.tokens, em.finished),
                    em.finish_reason if em.finished else None,
                    u,
                )
            )
        if include_usage:
            yield fmt.sse(
                fmt.usage_chunk(rid, created, model, shape.usage_object, fmt.usage(n_prompt, done))
            )
        yield fmt.SSE_DONE

    return _stream(ctx, state, first, frames())


def build_router(ctx: ServeContext) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/completions")
    async def completions(request: Request) -> Response:
        req = await parse_body(request, CompletionRequest)
        prompt_ids = await asyncio.to_thread(_prompt_ids, ctx, req.prompt)
        params = ctx.sampling(
            req.max_tokens,
            len(prompt_ids),
            req.temperature,
            req.top_p,
            req.seed,
            req.ignore_eos,
            req.stop,
        )
        rid = req.rid or ctx.new_id(_COMPLETION.id_prefix)
        return await _respond(
            ctx, request, _COMPLETION, rid, prompt_ids, params, req.stream, req.stream_options
        )

    @router.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        req = await parse_body(request, ChatRequest)
        prompt_ids = await asyncio.to_thread(
            ctx.backend.apply_chat_template, [m.model_dump() for m in req.messages]
        )
        max_tokens = req.max_completion_tokens or req.max_tokens
        param = "max_completion_tokens" if req.max_completion_tokens else "max_tokens"
        params = ctx.sampling(
            max_tokens,
            len(prompt_ids),
            req.temperature,
            req.top_p,
            req.seed,
            req.ignore_eos,
            req.stop,
            param=param,
        )
        rid = req.rid or ctx.new_id(_CHAT.id_prefix)
        return await _respond(
            ctx, request, _CHAT, rid, prompt_ids, params, req.stream, req.stream_options
        )

    return router
