"""llama.cpp's server: native `/completion` with `stream: true`.

One SSE event per token (the tokens of a verify step arrive as a burst, reference
peers-and-models.md §E); the last event has `stop: true`, `stop_type`, `tokens_predicted` and
`timings` with `draft_n` / `draft_n_accepted` when drafting happened. No `[DONE]` follows.
The OpenAI endpoints of llama.cpp are served by the OpenAI decoder (`--api completions|chat`).
"""

from __future__ import annotations

from typing import Any

from specscope.probe.flavors.base import (
    Decoder,
    Delta,
    HttpRequest,
    StreamError,
    TokenCounter,
    error_message,
    parse_json_object,
)
from specscope.probe.flavors.openai import OpenAIFlavor
from specscope.probe.specfields import cached_tokens_from, from_llamacpp_timings
from specscope.trace.model import RequestSpec

_STOP_TYPES = {"limit": "length", "eos": "stop", "word": "stop"}


class LlamaCppDecoder(Decoder):
    def __init__(self, counter: TokenCounter | None):
        super().__init__(counter)
        self._received = 0

    def on_event(self, data: str) -> Delta | None:
        obj = parse_json_object(data)
        msg = error_message(obj)
        if msg is not None:
            raise StreamError("server_error", f"server sent an error in the stream: {msg}")
        text = obj.get("content") if isinstance(obj.get("content"), str) else ""
        timings = obj.get("timings")
        if isinstance(timings, dict):
            self.merge_spec(from_llamacpp_timings(timings))
            cached = cached_tokens_from(timings)
            if cached is not None:
                self.cached_tokens = cached
        finish = None
        if obj.get("stop") is True:
            self.done = True
            st = obj.get("stop_type")
            finish = _STOP_TYPES.get(st, st) if isinstance(st, str) else "stop"
            self.finish_reason = finish
            predicted = obj.get("tokens_predicted")
            if not isinstance(predicted, int) and isinstance(timings, dict):
                predicted = timings.get("predicted_n")
            if isinstance(predicted, int) and not isinstance(predicted, bool):
                self.completion_tokens = predicted
                n = self.increment("tokens_predicted", predicted, 0) - self._received
                n = max(0, n)  # one token per event is an estimate: the final count may be less
            else:
                n = 1 if text else 0
            ev = obj.get("tokens_evaluated")
            if isinstance(ev, int) and not isinstance(ev, bool):
                self.prompt_tokens = ev
        else:
            tokens: Any = obj.get("tokens")
            n = len(tokens) if isinstance(tokens, list) and tokens else 1
        n = self.counted("events", n)
        self._received += n
        self.route({"content": text}, n)
        if text:
            self.text_parts.append(text)
        return Delta(n_tokens=n, text=text, finish_reason=finish)


class LlamaCppFlavor(OpenAIFlavor):
    name = "llamacpp"
    default_api = "native"
    supported_apis = ("native", "completions", "chat")
    tokenize_endpoints = (("/tokenize", "content"),)

    @property
    def n_variants(self) -> int:  # type: ignore[override]
        return 1 if self.api == "native" else super().n_variants

    def build_request(self, spec: RequestSpec, variant: int) -> HttpRequest:
        if self.api != "native":
            return super().build_request(spec, variant)
        body: dict[str, Any] = {
            "prompt": spec.prompt,
            "n_predict": spec.max_tokens,
            "temperature": spec.temperature,
            "stream": True,
        }
        if spec.ignore_eos:
            body["ignore_eos"] = True
        body.update(spec.extra)
        return HttpRequest("/completion", body)

    def decoder(self, spec: RequestSpec, counter: TokenCounter | None) -> Decoder:
        if self.api == "native":
            return LlamaCppDecoder(counter)
        return super().decoder(spec, counter)

    @property
    def needs_done_marker(self) -> str:
        return "stop: true" if self.api == "native" else "[DONE]"
