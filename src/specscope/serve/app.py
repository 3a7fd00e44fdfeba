"""create_app: the FastAPI app over a Backend (routes, scheduler, logs, metrics wired together)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from specscope.backend import Backend
from specscope.serve import routes_info, routes_native, routes_openai
from specscope.serve.context import ServeContext
from specscope.serve.logs import ServerLog
from specscope.serve.metrics import ServeMetrics
from specscope.serve.options import ServeOptions
from specscope.serve.scheduler import Scheduler
from specscope.serve.validation import ApiError, error_body, error_response


def create_app(backend: Backend, options: ServeOptions | None = None) -> FastAPI:
    opts = options or ServeOptions()
    extra = backend.info.extra
    model_name = opts.served_model_name or backend.info.model
    log = ServerLog(opts.log_file, opts.log_to_stderr)
    metrics = ServeMetrics(model_name)
    max_batch = opts.max_batch or int(extra.get("max_batch", 256))
    scheduler = Scheduler(
        backend, metrics, log, max_batch, opts.decode_log_interval, opts.step_log, opts.faults
    )
    ctx = ServeContext(
        backend=backend,
        scheduler=scheduler,
        metrics=metrics,
        log=log,
        model_name=model_name,
        stream_interval=opts.stream_interval or int(extra.get("stream_interval", 1)),
        per_token_events=(
            opts.per_token_events
            if opts.per_token_events is not None
            else bool(extra.get("per_token_events", False))
        ),
        decode_log_interval=opts.decode_log_interval,
        faults=opts.faults,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        app.state.loop = asyncio.get_running_loop()
        scheduler.start()
        info = backend.info
        log.info(
            f"specscope serve: model={model_name} speculative_algorithm={info.spec_algorithm} "
            f"num_draft_tokens={info.num_draft_tokens} stream_interval={ctx.stream_interval} "
            f"per_token_events={ctx.per_token_events} max_running_requests={max_batch}"
            + (f" faults={','.join(ctx.faults.names)}" if ctx.faults.names else "")
        )
        try:
            yield
        finally:
            await scheduler.stop()
            log.close()

    app = FastAPI(title="specscope serve", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.ctx = ctx

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        param = ".".join(str(p) for p in first["loc"]) or None
        return JSONResponse(error_body(f"{param}: {first['msg']}", 400, param), 400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(
            error_body(str(exc.detail), exc.status_code, None, kind), exc.status_code
        )

    app.include_router(routes_openai.build_router(ctx))
    app.include_router(routes_native.build_router(ctx))
    app.include_router(routes_info.build_router(ctx))
    return app
