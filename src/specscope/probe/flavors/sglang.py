"""SGLang: the native `/generate` stream, and its OpenAI layer with `return_spec_tokens_details`.

Native chunks carry cumulative `meta_info.completion_tokens` (so tokens per chunk are exact) and
cumulative `text` (unless the server runs with incremental output); the finished chunk carries the
speculation fields (`spec_verify_ct`, `spec_accept_length`, histogram, under every name they have
had). The stream ends with `data: [DONE]`.
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
from specscope.probe.specfields import cached_tokens_from, from_sglang_meta
from specscope.trace.model import RequestSpec


def _finish_reason(v: Any) -> str | None:
    """`{"type": "length", "length": 128}` (native) or a plain string."""
    if isinstance(v, dict):
        t = v.get("type")
        return t if isinstance(t, str) else None
    return v if isinstance(v, str) else None


class SGLangNativeDecoder(Decoder):
    def __init__(self, counter: TokenCounter | None):
        super().__init__(counter)
        self._last_ct = 0
        self._text = ""

    def on_event(self, data: str) -> Delta | None:
        if data.strip() == "[DONE]":
            self.done = True
            return None
        obj = parse_json_object(data)
        msg = error_message(obj)
        if msg is not None and "meta_info" not in obj:
            raise StreamError("server_error", f"server sent an error in the stream: {msg}")
        meta = obj.get("meta_info") if isinstance(obj.get("meta_info"), dict) else {}
        text = obj.get("text") if isinstance(obj.get("text"), str) else ""
        # Cumulative text by default; incremental when the server runs with incremental output.
        if text.startswith(self._text):
            delta_text = text[len(self._text) :]
            self._text = text
        else:
            delta_text = text
            self._text += text
        if isinstance(meta.get("id"), str) and self.request_id is None:
            self.request_id = meta["id"]
        finish = _finish_reason(meta.get("finish_reason"))
        if finish is not None:
            self.finish_reason = finish
        pt = meta.get("prompt_tokens")
        if isinstance(pt, int) and not isinstance(pt, bool):
            self.prompt_tokens = pt
        cached = cached_tokens_from(meta)
        if cached is not None:
            self.cached_tokens = cached
        ct = meta.get("completion_tokens")
        if isinstance(ct, int) and not isinstance(ct, bool):
            self.completion_tokens = ct  # the raw value, kept even when it is impossible
            n = self.counted(
                "meta_info", self.increment("meta_info.completion_tokens", ct, self._last_ct)
            )
            self._last_ct = ct
        else:
            n = self.count_text(delta_text)
        self.merge_spec(from_sglang_meta(meta))
        self.route({"text": delta_text}, n)
        if delta_text:
            self.text_parts.append(delta_text)
        return Delta(n_tokens=n, text=delta_text, finish_reason=finish)


class SGLangFlavor(OpenAIFlavor):
    name = "sglang"
    default_api = "native"
    supported_apis = ("native", "completions", "chat")
    tokenize_endpoints = (("/tokenize", "prompt"), ("/v1/tokenize", "prompt"))

    @property
    def n_variants(self) -> int:  # type: ignore[override]
        return 2 if self.api == "native" else super().n_variants

    def extras(self, spec: RequestSpec) -> dict[str, Any]:
        out = super().extras(spec)
        out["return_spec_tokens_details"] = True
        return out

    def build_request(self, spec: RequestSpec, variant: int) -> HttpRequest:
        if self.api != "native":
            return super().build_request(spec, variant)
        sampling: dict[str, Any] = {
            "max_new_tokens": spec.max_tokens,
            "temperature": spec.temperature,
        }
        if spec.ignore_eos:
            sampling["ignore_eos"] = True
        body: dict[str, Any] = {"sampling_params": sampling, "stream": True}
        if isinstance(spec.prompt, list) and all(isinstance(t, int) for t in spec.prompt):
            body["input_ids"] = spec.prompt
        else:
            body["text"] = spec.prompt
        if variant == 0:
            body.update(spec.extra)
        return HttpRequest("/generate", body)

    def decoder(self, spec: RequestSpec, counter: TokenCounter | None) -> Decoder:
        if self.api == "native":
            return SGLangNativeDecoder(counter)
        return super().decoder(spec, counter)
