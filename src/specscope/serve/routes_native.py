"""SGLang-native /generate (meta_info with cumulative completion_tokens on every chunk and the
speculation fields on the final one) and /tokenize (SGLang/vLLM/llama.cpp request shapes)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from specscope.serve import formatting as fmt
from specscope.serve.context import CLIENT_CLOSED, ServeContext
from specscope.serve.streaming import emissions, wait_or_disconnect
from specscope.serve.textstream import TextStream
from specscope.serve.validation import ApiError, GenerateRequest, TokenizeRequest, parse_body


def build_router(ctx: ServeContext) -> APIRouter:
    router = APIRouter()

    @router.post("/generate")
    async def generate(request: Request) -> Response:
        req = await parse_body(request, GenerateRequest)
        if (req.text is None) == (req.input_ids is None):
            raise ApiError("exactly one of text or input_ids is required", param="text")
        prompt_ids = (
            req.input_ids
            if req.input_ids is not None
            else await asyncio.to_thread(ctx.backend.tokenize, req.text or "")
        )
        sp = req.sampling_params
        params = ctx.sampling(
            sp.max_new_tokens,
            len(prompt_ids),
            sp.temperature,
            sp.top_p,
            sp.sampling_seed,
            sp.ignore_eos,
            sp.stop,
            param="sampling_params.max_new_tokens",
        )
        rid = req.rid or ctx.new_id()
        started = await ctx.start(request, rid, prompt_ids, params)
        if isinstance(started, Response):
            return started
        state, first = started
        interval = sp.stream_interval or ctx.stream_interval
        ndt = ctx.num_draft_tokens

        def body(text: str, done: int, reason: str | None, final: bool) -> dict:
            e2e = time.perf_counter() - state.t_arrival if final else None
            out = {
                "text": text,
                "meta_info": fmt.meta_info(state, done, reason, final, ndt, e2e),
                "index": 0,
            }
            if final:  # SGLang's field: the request's token ids, for checking the text against
                out["output_ids"] = list(state.output_ids)
            return out

        async def frames() -> AsyncIterator[str]:
            text = TextStream(ctx.backend.detokenize)  # SGLang streams the cumulative text
            async for em in emissions(state, first, ctx.metrics, interval, ctx.per_token_events):
                if em.finish_reason == "abort":
                    return  # simulated mid-stream disconnect
                text.add(em.tokens, em.finished)
                yield fmt.sse(
                    body(
                        text.text,
                        em.completion_tokens,
                        em.finish_reason if em.finished else None,
                        em.finished,
                    )
                )
            yield fmt.SSE_DONE

        if req.stream:

            async def guarded() -> AsyncIterator[str]:
                try:
                    async for f in frames():
                        yield f
                finally:
                    ctx.scheduler.cancel(rid)

            return StreamingResponse(guarded(), media_type="text/event-stream")

        async def collect() -> dict | None:
            last = None
            ids: list[int] = []
            async for em in emissions(state, first, ctx.metrics):
                ids += em.tokens
                last = em
            if last is None or last.finish_reason == "abort":
                return None
            return body(
                ctx.backend.detokenize(ids), last.completion_tokens, last.finish_reason, True
            )

        task = asyncio.ensure_future(collect())
        try:
            result = await wait_or_disconnect(task, request.is_disconnected)
        finally:
            ctx.scheduler.cancel(rid)
        if result is None:
            if task.cancelled():
                return Response(status_code=CLIENT_CLOSED)
            return JSONResponse(fmt.error_body_abort(), status_code=500)
        return JSONResponse(result)

    @router.post("/tokenize")
    async def tokenize(request: Request) -> JSONResponse:
        req = await parse_body(request, TokenizeRequest)
        if req.messages is not None:
            tokens = await asyncio.to_thread(
                ctx.backend.apply_chat_template, [m.model_dump() for m in req.messages]
            )
        else:
            text = next((t for t in (req.prompt, req.text, req.content) if t is not None), None)
            if text is None:
                raise ApiError(
                    "one of prompt, text, content or messages is required", param="prompt"
                )
            tokens = await asyncio.to_thread(ctx.backend.tokenize, text)
        return JSONResponse(
            {"tokens": tokens, "count": len(tokens), "max_model_len": ctx.backend.info.max_context}
        )

    return router
