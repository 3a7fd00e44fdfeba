"""What a server flavor must provide: the request it wants and a decoder for its stream.

A flavor is stateless apart from `variant`, the rung of its fallback ladder that the server
accepted (e.g. OpenAI servers that reject `stream_options` with HTTP 400 are retried without it,
and later requests of the run start from the rung that worked).
A decoder is per request: it turns each SSE `data` payload into a `Delta` and remembers the
request-level facts (finish reason, reported token counts, speculation fields).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specscope.trace.model import RequestSpec, ServerSpecFields, TokenCountSource

TokenCounter = Callable[[str], int]


class StreamError(Exception):
    """The stream said something we must record as the request's error (server-sent error
    object, JSON that does not parse). `kind` is an ErrorInfo kind."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(slots=True)
class Delta:
    """What one event added. `n_tokens` None: the event did not say; the decoder counts it."""

    n_tokens: int
    text: str = ""
    finish_reason: str | None = None
    server_ts: float | None = None


@dataclass(frozen=True, slots=True)
class HttpRequest:
    path: str
    body: dict[str, Any]


def parse_json_object(data: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except (json.JSONDecodeError, RecursionError, ValueError) as e:
        raise StreamError(
            "malformed_json", f"event data is not JSON: {data[:120]!r} ({e})"
        ) from None
    if not isinstance(obj, dict):
        raise StreamError("malformed_json", f"event data is not a JSON object: {data[:120]!r}")
    return obj


def error_message(obj: dict[str, Any]) -> str | None:
    """A server-sent error object (`{"error": ...}` or `{"object": "error", ...}`), as text."""
    err = obj.get("error")
    if err is None and obj.get("object") == "error":
        err = obj
    if err is None or err is False:
        return None
    if isinstance(err, dict):
        msg = err.get("message") or err.get("msg") or json.dumps(err)[:300]
        return str(msg)
    return str(err)[:300]


class Decoder(ABC):
    """Per-request stream decoder. Subclasses implement `on_event`."""

    def __init__(self, counter: TokenCounter | None = None):
        self.counter = counter
        self.done = False  # the flavor's end marker arrived ([DONE], or stop: true)
        self.finish_reason: str | None = None
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.request_id: str | None = None
        self.server_spec: ServerSpecFields | None = None
        self.text_parts: list[str] = []
        self.cached_tokens: int | None = None
        #: Tokens by the delta field that carried them (see `route`).
        self.field_tokens: Counter[str] = Counter()
        self._sources: Counter[str] = Counter()

    @abstractmethod
    def on_event(self, data: str) -> Delta | None:
        """Decode one SSE data payload; None for events that carry nothing (e.g. [DONE])."""

    def count_text(self, text: str) -> int:
        """Fallback when the server says nothing about tokens: tokenizer count, else 1/event."""
        if not text:
            return 0
        if self.counter is not None:
            self._sources["tokenizer"] += 1
            return self.counter(text)
        self._sources["events"] += 1
        return 1

    def increment(self, field: str, value: int, previous: int) -> int:
        """New tokens a cumulative count reports (`value` now, `previous` before). A count that
        is negative or goes backwards is impossible: the request's error, with the raw values."""
        if value < 0:
            raise StreamError("impossible_count", f"server reported {field} = {value} (negative)")
        if value < previous:
            raise StreamError(
                "impossible_count", f"server's {field} went backwards: {previous} then {value}"
            )
        return value - previous

    def route(self, fields: dict[str, str], n: int) -> None:
        """Attribute an event's `n` tokens to the delta fields that carried its text, split by
        characters where several did (a parsers-on server moves text from `content` to
        `reasoning_content` or `tool_calls`; this records where it went)."""
        carried = {k: len(v) for k, v in fields.items() if v}
        total = sum(carried.values())
        if n <= 0 or total == 0:
            return
        given = 0
        for i, (k, chars) in enumerate(sorted(carried.items(), key=lambda kv: -kv[1])):
            share = n - given if i == len(carried) - 1 else round(n * chars / total)
            self.field_tokens[k] += share
            given += share

    def counted(self, source: TokenCountSource, n: int) -> int:
        if n > 0:
            self._sources[source] += 1
        return n

    @property
    def token_count_source(self) -> TokenCountSource:
        if not self._sources:
            return "unknown"
        return self._sources.most_common(1)[0][0]  # type: ignore[return-value]

    def merge_spec(self, fields: ServerSpecFields | None) -> None:
        """Later reports win field by field (final chunks carry the totals)."""
        if fields is None:
            return
        if self.server_spec is None:
            self.server_spec = fields
            return
        for name in ServerSpecFields.model_fields:
            value = getattr(fields, name)
            if value not in (None, "", {}):
                if name == "raw":
                    self.server_spec.raw.update(value)
                else:
                    setattr(self.server_spec, name, value)


class Flavor(ABC):
    """A server family: how to ask for a streamed generation and how to read the answer."""

    name: str = ""
    #: Number of request variants to try, in order, when the server answers HTTP 400.
    n_variants: int = 1
    #: (path, JSON key of the text) pairs of tokenize endpoints to try, in order.
    tokenize_endpoints: tuple[tuple[str, str], ...] = (("/tokenize", "prompt"),)

    def __init__(self, api: str | None = None, model: str | None = None):
        self.api = api or self.default_api
        self.model = model
        self.variant = 0

    default_api: str = "completions"
    supported_apis: tuple[str, ...] = ("completions", "chat")

    @abstractmethod
    def build_request(self, spec: RequestSpec, variant: int) -> HttpRequest: ...

    @abstractmethod
    def decoder(self, spec: RequestSpec, counter: TokenCounter | None) -> Decoder: ...

    @property
    def needs_done_marker(self) -> str:
        """What ends a complete stream, for messages ('[DONE]' or 'stop: true')."""
        return "[DONE]"
