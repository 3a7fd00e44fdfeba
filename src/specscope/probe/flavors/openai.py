"""OpenAI-compatible `/v1/completions` and `/v1/chat/completions` streams.

Per-chunk token counts, best first: cumulative `usage.completion_tokens` on every chunk
(`stream_options.continuous_usage_stats`, vLLM and SGLang), the number of logprob entries in the
chunk, a tokenizer count of the delta text (`--tokenizer`), else one token per content event.
Servers that reject the richer request (HTTP 400) are retried one rung lower on the ladder.
Speculation fields ride along where a server adds them: vLLM's `metrics.speculative_decoding`
on the final usage chunk, SGLang's `sglext.spec_tokens_details` chunk (`choices: []`).

Chat deltas carry generated text in several fields once a server runs reasoning or tool-call
parsers: `content`, `reasoning_content` (SGLang, older vLLM), `reasoning` (newer vLLM) and
`tool_calls[].function` (`name`, `arguments`). All of them are generated tokens: every one is
counted (when the server sends no per-chunk usage) and its share is recorded per field, so
turning parsers on moves tokens between fields instead of losing them.
"""

from __future__ import annotations

from typing import Any

from specscope.probe.flavors.base import (
    Decoder,
    Delta,
    Flavor,
    HttpRequest,
    StreamError,
    TokenCounter,
    error_message,
    parse_json_object,
)
from specscope.probe.specfields import cached_tokens_from, from_sglext, from_vllm_metrics
from specscope.trace.model import RequestSpec

# The fallback ladder, richest first. Each rung: (stream_options, ask for logprobs, send extras).
_LADDER: tuple[tuple[dict[str, Any] | None, bool, bool], ...] = (
    ({"include_usage": True, "continuous_usage_stats": True}, False, True),
    ({"include_usage": True}, True, True),
    (None, True, True),
    (None, False, False),
)


class OpenAIDecoder(Decoder):
    def __init__(self, api: str, counter: TokenCounter | None):
        super().__init__(counter)
        self.chat = api == "chat"
        self._last_usage_ct = 0
        self.continuous_usage = False

    def on_event(self, data: str) -> Delta | None:
        if data.strip() == "[DONE]":
            self.done = True
            return None
        obj = parse_json_object(data)
        choices = obj.get("choices")
        msg = error_message(obj)
        if msg is not None and not choices:
            raise StreamError("server_error", f"server sent an error in the stream: {msg}")
        if isinstance(obj.get("id"), str) and self.request_id is None:
            self.request_id = obj["id"]
        if "sglext" in obj:
            self.merge_spec(from_sglext(obj.get("sglext")))
        if isinstance(obj.get("metrics"), dict):
            self.merge_spec(from_vllm_metrics(obj["metrics"]))

        text, finish, lp_count = "", None, None
        fields: dict[str, str] = {}
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            c = choices[0]
            if self.chat:
                delta = c.get("delta") if isinstance(c.get("delta"), dict) else {}
                fields = chat_delta_fields(delta)
                text = "".join(fields.values())
                lp = c.get("logprobs")
                if isinstance(lp, dict) and isinstance(lp.get("content"), list):
                    lp_count = len(lp["content"])
            else:
                text = _str(c.get("text"))
                fields = {"text": text}
                lp = c.get("logprobs")
                if isinstance(lp, dict) and isinstance(lp.get("tokens"), list):
                    lp_count = len(lp["tokens"])
            if isinstance(c.get("finish_reason"), str):
                finish = c["finish_reason"]
                self.finish_reason = finish
        has_choices = isinstance(choices, list) and bool(choices)

        n: int | None = None
        usage = obj.get("usage")
        if isinstance(usage, dict):
            ct = usage.get("completion_tokens")
            if isinstance(ct, int) and not isinstance(ct, bool):
                self.completion_tokens = ct  # the raw value, kept even when it is impossible
                if has_choices:
                    self.continuous_usage = True
                if self.continuous_usage:
                    n = self.counted(
                        "usage", self.increment("usage.completion_tokens", ct, self._last_usage_ct)
                    )
                    self._last_usage_ct = ct
            pt = usage.get("prompt_tokens")
            if isinstance(pt, int) and not isinstance(pt, bool):
                self.prompt_tokens = pt
            cached = cached_tokens_from(usage)
            if cached is not None:
                self.cached_tokens = cached
        if n is None:
            if lp_count is not None:
                n = self.counted("logprobs", lp_count)
            else:
                n = self.count_text(text)
        self.route(fields, n)
        if text:
            self.text_parts.append(text)
        return Delta(n_tokens=n, text=text, finish_reason=finish)


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


#: Chat delta fields that carry generated text, in the order their text is joined.
CHAT_TEXT_FIELDS = ("reasoning_content", "reasoning", "content")


def chat_delta_fields(delta: dict[str, Any]) -> dict[str, str]:
    """The generated text of one chat delta by field: `reasoning_content`, `reasoning`,
    `content`, and `tool_calls` (every call's function name and argument text)."""
    out = {k: v for k in CHAT_TEXT_FIELDS if (v := _str(delta.get(k)))}
    calls = delta.get("tool_calls")
    if isinstance(calls, list):
        parts = []
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                parts.append(_str(fn.get("name")) + _str(fn.get("arguments")))
        if "".join(parts):
            out["tool_calls"] = "".join(parts)
    return out


class OpenAIFlavor(Flavor):
    """Any OpenAI-compatible server; subclasses add their own extras."""

    name = "openai"
    n_variants = len(_LADDER)
    default_api = "completions"
    supported_apis = ("completions", "chat")
    tokenize_endpoints = (
        ("/tokenize", "prompt"),
        ("/v1/tokenize", "prompt"),
        ("/tokenize", "content"),
    )

    def extras(self, spec: RequestSpec) -> dict[str, Any]:
        """Server-specific request fields (dropped on the last rung of the ladder)."""
        return {"ignore_eos": spec.ignore_eos} if spec.ignore_eos else {}

    def build_request(self, spec: RequestSpec, variant: int) -> HttpRequest:
        stream_options, logprobs, send_extras = _LADDER[min(variant, len(_LADDER) - 1)]
        body: dict[str, Any] = {}
        if self.model:
            body["model"] = self.model
        chat = self.api == "chat"
        if chat:
            prompt = spec.prompt
            if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
                body["messages"] = prompt
            else:
                body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = spec.prompt
        body["max_tokens"] = spec.max_tokens
        body["temperature"] = spec.temperature
        body["stream"] = True
        if stream_options is not None:
            body["stream_options"] = dict(stream_options)
        if logprobs:
            body["logprobs"] = True if chat else 1
        if send_extras:
            body.update(self.extras(spec))
            body.update(spec.extra)
        path = "/v1/chat/completions" if chat else "/v1/completions"
        return HttpRequest(path, body)

    def decoder(self, spec: RequestSpec, counter: TokenCounter | None) -> Decoder:
        return OpenAIDecoder(self.api, counter)
