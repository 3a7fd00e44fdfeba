"""Response bodies: OpenAI completions/chat (chunks and full) and SGLang-native meta_info.

Shapes follow vLLM/SGLang's OpenAI layer and SGLang's /generate (observability.md §1b, §5).
"""

from __future__ import annotations

import json
import time
from typing import Any

from specscope.serve.scheduler import RequestState


def sse(obj: dict[str, Any] | str) -> str:
    payload = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {payload}\n\n"


SSE_DONE = sse("[DONE]")


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def now_s() -> int:
    return int(time.time())


def completion_chunk(
    rid: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str | None,
    usage_: dict[str, int] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
    }
    if usage_ is not None:
        body["usage"] = usage_
    return body


def chat_chunk(
    rid: str,
    created: int,
    model: str,
    delta: dict[str, Any],
    finish_reason: str | None,
    usage_: dict[str, int] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if usage_ is not None:
        body["usage"] = usage_
    return body


def usage_chunk(
    rid: str, created: int, model: str, obj: str, usage_: dict[str, int]
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage_,
    }


def completion_full(
    rid: str, created: int, model: str, text: str, finish_reason: str | None, usage_: dict[str, int]
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
        "usage": usage_,
    }


def chat_full(
    rid: str, created: int, model: str, text: str, finish_reason: str | None, usage_: dict[str, int]
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage_,
    }


def sglang_finish_reason(reason: str | None, completion_tokens: int) -> dict[str, Any] | None:
    if reason is None:
        return None
    if reason == "length":
        return {"type": "length", "length": completion_tokens}
    if reason == "abort":
        return {"type": "abort", "message": "aborted"}
    return {"type": reason, "matched": None}


def spec_fields(state: RequestState, num_draft_tokens: int) -> dict[str, Any]:
    """SGLang's final-chunk speculation fields, with both the newer and the older names."""
    verify = state.verify_ct
    proposed = state.proposed_drafts or verify * max(0, num_draft_tokens - 1)
    accepted = state.accepted_drafts
    hist = list(state.histogram)
    return {
        "spec_verify_ct": verify,
        "spec_accept_length": state.completion_tokens / verify if verify else 0.0,
        "spec_accept_rate": accepted / proposed if proposed else 0.0,
        "spec_num_correct_drafts": accepted,
        "spec_num_proposed_drafts": proposed,
        "spec_correct_drafts_histogram": hist,
        "spec_accepted_drafts": accepted,
        "spec_proposed_drafts": proposed,
        "spec_accept_histogram": hist,
    }


def meta_info(
    state: RequestState,
    completion_tokens: int,
    finish_reason: str | None,
    final: bool,
    num_draft_tokens: int,
    e2e_latency: float | None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": state.request_id,
        "finish_reason": sglang_finish_reason(finish_reason, completion_tokens),
        "prompt_tokens": len(state.prompt_ids),
        "completion_tokens": completion_tokens,
        "cached_tokens": 0,
    }
    if final:
        meta["e2e_latency"] = e2e_latency
        if num_draft_tokens > 0:
            meta.update(spec_fields(state, num_draft_tokens))
    return meta


def error_body_abort() -> dict[str, Any]:
    return {
        "error": {
            "message": "request aborted by the server",
            "type": "server_error",
            "param": None,
            "code": 500,
        }
    }
