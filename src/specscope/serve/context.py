"""What every route needs: the backend, the scheduler, metrics, the log, resolved options."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import Response

from specscope.backend import Backend, SamplingParams
from specscope.serve.faults import HostFaults
from specscope.serve.logs import ServerLog
from specscope.serve.metrics import ServeMetrics
from specscope.serve.scheduler import ErrorEvent, RequestState, Scheduler, StepEvent
from specscope.serve.streaming import first_event, wait_or_disconnect
from specscope.serve.validation import CLIENT_CLOSED, ApiError, error_response

DEFAULT_MAX_TOKENS = 128


@dataclass
class ServeContext:
    backend: Backend
    scheduler: Scheduler
    metrics: ServeMetrics
    log: ServerLog
    model_name: str
    stream_interval: int
    per_token_events: bool
    decode_log_interval: int
    faults: HostFaults = field(default_factory=HostFaults)
    started_unix: float = field(default_factory=time.time)

    @property
    def num_draft_tokens(self) -> int:
        return self.backend.info.num_draft_tokens

    def new_id(self, prefix: str = "") -> str:
        return f"{prefix}{uuid.uuid4().hex}"

    def sampling(
        self,
        max_tokens: int | None,
        prompt_len: int,
        temperature: float,
        top_p: float,
        seed: int | None,
        ignore_eos: bool,
        stop: str | list[str] | None,
        param: str = "max_tokens",
    ) -> SamplingParams:
        """Sampling parameters, or a 400 when the request cannot fit the context."""
        limit = self.backend.info.max_context
        if prompt_len >= limit:
            raise ApiError(
                f"the prompt is {prompt_len} tokens; this model's maximum context "
                f"length is {limit} tokens",
                param="prompt",
            )
        n = max_tokens if max_tokens is not None else min(DEFAULT_MAX_TOKENS, limit - prompt_len)
        if prompt_len + n > limit:
            raise ApiError(
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt_len + n} tokens ({prompt_len} in the messages, {n} in the completion).",
                param=param,
            )
        if n < 1:
            raise ApiError(f"{param}: must be at least 1", param=param)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        return SamplingParams(
            max_tokens=n,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            ignore_eos=ignore_eos,
            stop=stops,
        )

    async def start(
        self, request: Request, rid: str, prompt_ids: list[int], params: SamplingParams
    ) -> tuple[RequestState, StepEvent] | Response:
        """Queue the request and wait for its first step; an admission error or a client that
        left before the first token is answered here (headers are not sent yet)."""
        state = RequestState(rid, prompt_ids, params)
        self.scheduler.submit(state)
        task = asyncio.ensure_future(first_event(state))
        try:
            first = await wait_or_disconnect(task, request.is_disconnected)
        except BaseException:
            self.scheduler.cancel(rid)
            raise
        if first is None:
            self.scheduler.cancel(rid)
            return Response(status_code=CLIENT_CLOSED)
        if isinstance(first, ErrorEvent):
            kind = "server_error" if first.status >= 500 else "invalid_request_error"
            return error_response(ApiError(first.message, first.status, type_=kind))
        return state, first
