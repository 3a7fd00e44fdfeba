"""/v1/models, /get_server_info (+ /server_info), /metrics, /health, and the twin's truth."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from specscope.serve.context import ServeContext
from specscope.serve.validation import ApiError


def build_router(ctx: ServeContext) -> APIRouter:
    router = APIRouter()
    info = ctx.backend.info

    @router.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": ctx.model_name,
                    "object": "model",
                    "created": int(ctx.started_unix),
                    "owned_by": "specscope",
                    "root": info.model,
                    "max_model_len": info.max_context,
                }
            ],
        }

    async def server_info() -> dict[str, Any]:
        state: dict[str, Any] = {
            "last_gen_throughput": ctx.scheduler.last_gen_throughput,
            "load": len(ctx.scheduler.running) + ctx.scheduler.queued,
            "memory_usage": {},
        }
        avg = ctx.scheduler.avg_spec_accept_length
        if avg is not None:
            state["avg_spec_accept_length"] = avg
        return {
            "model_path": info.model,
            "served_model_name": ctx.model_name,
            "context_length": info.max_context,
            "speculative_algorithm": info.spec_algorithm,
            "speculative_num_draft_tokens": info.num_draft_tokens or None,
            # SGLang's name for the DFlash drafter's sliding window (None: unbounded / no drafter).
            "speculative_draft_window_size": info.extra.get("draft_window"),
            "page_size": info.page_size,
            "stream_interval": ctx.stream_interval,
            "decode_log_interval": ctx.decode_log_interval,
            "max_running_requests": ctx.scheduler.max_batch,
            "internal_states": [state],
            "version": "specscope-serve",
            "backend": {
                k: v for k, v in info.extra.items() if isinstance(v, str | int | float | bool)
            },
        }

    router.add_api_route("/get_server_info", server_info, methods=["GET"])
    router.add_api_route("/server_info", server_info, methods=["GET"])

    @router.get("/metrics")
    async def metrics() -> Response:
        return Response(ctx.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    truth = getattr(ctx.backend, "truth", None)
    if callable(truth):

        @router.get("/twin/truth/{request_id}")
        async def twin_truth(request_id: str) -> JSONResponse:
            found = truth(request_id)
            if found is None:
                raise ApiError(
                    f"no truth for request {request_id!r}",
                    status=404,
                    param="request_id",
                    type_="not_found_error",
                )
            return JSONResponse(found)

    describe = getattr(ctx.backend, "describe", None)
    if callable(describe):

        @router.get("/twin/scenario")
        async def twin_scenario() -> dict[str, Any]:
            return describe()

    return router
