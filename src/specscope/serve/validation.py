"""Request bodies and OpenAI-style errors.

Unknown fields are rejected (extra="forbid") so that a client's typo is a 400 naming the field,
not a silently ignored setting. The accepted fields are the ones OpenAI, vLLM and SGLang clients
commonly send; fields the server cannot honour (n > 1) are rejected explicitly.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import ClientDisconnect

MAX_TOKENS_CEILING = 10_000_000
# A sampling seed is a signed 64-bit integer, as in vLLM's OpenAI protocol; negative seeds are
# valid (backends fold them into their generator's range), larger ones are refused with a 400.
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1
# A request body larger than this is refused (413) before it is read whole: a prompt of a
# million tokens is ~4 MiB of text or ~7 MiB of token ids; more is a mistake or an attack.
MAX_BODY_BYTES = 8 << 20
CLIENT_CLOSED = 499  # nginx's "client closed request"; never seen by the client that left
BodyT = TypeVar("BodyT", bound=BaseModel)


class ApiError(Exception):
    def __init__(
        self,
        message: str,
        status: int = 400,
        param: str | None = None,
        type_: str = "invalid_request_error",
    ):
        super().__init__(message)
        self.message, self.status, self.param, self.type = message, status, param, type_


def error_body(
    message: str, status: int, param: str | None = None, type_: str = "invalid_request_error"
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": status}}


def error_response(err: ApiError) -> JSONResponse:
    return JSONResponse(error_body(err.message, err.status, err.param, err.type), err.status)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamOptions(_Body):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class _Sampling(_Body):
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_CEILING)
    temperature: float = Field(0.0, ge=0, le=100)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int | None = None
    min_p: float | None = None
    n: int = Field(1, ge=1, le=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=SEED_MIN, le=SEED_MAX)
    ignore_eos: bool = False
    min_tokens: int | None = None
    logprobs: bool | int | None = None
    top_logprobs: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    skip_special_tokens: bool | None = None
    return_spec_tokens_details: bool | None = None
    timings_per_token: bool | None = None
    rid: str | None = None


TokenId = Annotated[int, Field(ge=0)]


class CompletionRequest(_Sampling):
    prompt: str | list[TokenId] | list[str]
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_CEILING)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    separate_reasoning: bool | None = None


class NativeSamplingParams(_Body):
    max_new_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_CEILING)
    temperature: float = Field(0.0, ge=0, le=100)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int | None = None
    min_p: float | None = None
    ignore_eos: bool = False
    stop: str | list[str] | None = None
    skip_special_tokens: bool | None = None
    min_new_tokens: int | None = None
    repetition_penalty: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    stream_interval: int | None = Field(None, ge=1)
    sampling_seed: int | None = Field(None, ge=SEED_MIN, le=SEED_MAX)
    n: int = Field(1, ge=1, le=1)


class GenerateRequest(_Body):
    text: str | None = None
    input_ids: list[TokenId] | None = None
    sampling_params: NativeSamplingParams = Field(default_factory=NativeSamplingParams)
    stream: bool = False
    rid: str | None = None
    return_logprob: bool | None = None
    model: str | None = None


class TokenizeRequest(_Body):
    prompt: str | None = None
    text: str | None = None
    content: str | None = None
    messages: list[ChatMessage] | None = None
    model: str | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool | None = None
    with_pieces: bool | None = None


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The body, at most `limit` bytes (413 beyond, told by Content-Length or counted while
    reading); a client that leaves mid-body is an ApiError, never an unhandled exception."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(
            f"request body of {declared} bytes is larger than the {limit}-byte limit", status=413
        )
    parts: list[bytes] = []
    size = 0
    try:
        async for piece in request.stream():
            size += len(piece)
            if size > limit:
                raise ApiError(f"request body is larger than the {limit}-byte limit", status=413)
            parts.append(piece)
    except ClientDisconnect:
        raise ApiError(
            f"client disconnected after {size} bytes of the body", status=CLIENT_CLOSED
        ) from None
    return b"".join(parts)


def _decode(raw: bytes, model: type[BodyT]) -> BodyT:
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ApiError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError("request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        msg = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
        raise ApiError(f"{param}: {msg}", param=param) from None


async def parse_body(request: Request, model: type[BodyT]) -> BodyT:
    """The body as `model`, or ApiError(400/413) saying what is wrong and where. Parsed in a
    worker thread: a large body must not stall the event loop that streams other requests."""
    raw = await read_body(request)
    if len(raw) < 64 << 10:
        return _decode(raw, model)
    return await asyncio.to_thread(_decode, raw, model)
