"""Preflight: is the server at a URL an OpenAI-compatible server at all?

Asked first, before any run directory exists, by `probe` and `diagnose` alike (through
`connect.detect_server`): `GET /v1/models` must answer an OpenAI model list (a JSON object
with a `data` list), or, failing that, one of the flavors' own info endpoints (SGLang's
`/get_server_info` / `/server_info`, llama.cpp's `/props`) must answer a JSON object. A server
that answers but does neither (404, an HTML page, JSON without `data`) is not one: `NotOpenAIServer`,
one line, which the commands print as a usage error (exit 2). A server that does not answer at
all (refused, timed out) is not a preflight failure: the caller goes on as for any unreachable
target (a recorded failed run, exit 1). Answers that say the server is there but unwilling
(401/403: a key is needed; 5xx: it is broken or loading) are left to the measuring path too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp

from specscope.probe.detect import get_json
from specscope.probe.endpoint import strip_api_suffix

MODELS_PATH = "/v1/models"
# The flavors' own info endpoints (probe.detect): a native server answering one passes.
INFO_PATHS = ("/get_server_info", "/server_info", "/props")


class NotOpenAIServer(Exception):
    """The server answered, but not as an OpenAI-compatible server; the message is one line:
    `not an OpenAI-compatible server (HTTP 404 on http://HOST:PORT/v1/models)`."""


@dataclass(frozen=True)
class Preflight:
    """What the preflight saw: `reachable` False with `error` when nothing answered."""

    reachable: bool
    status: int | None = None
    error: str | None = None


def _is_model_list(body: Any) -> bool:
    return isinstance(body, dict) and isinstance(body.get("data"), list)


def _what_was_wrong(status: int, body: Any, content_type: str | None) -> str:
    if status != 200:
        return f"HTTP {status}"
    if body is None:
        return f"HTTP {status}, {content_type or 'a body'} that is not JSON"
    return f"HTTP {status}, JSON without a `data` model list"


async def preflight(
    session: aiohttp.ClientSession, url: str, *, timeout_s: float = 10.0
) -> Preflight:
    """Check the server at `url` (a trailing `/v1` is accepted) before anything else.

    Raises NotOpenAIServer when it answers but is not an OpenAI-compatible server; returns
    `Preflight(reachable=False, error=...)` when it does not answer at all."""
    base = strip_api_suffix(url)
    models_url = base + MODELS_PATH
    status, body, err, ctype = await get_json(session, models_url, timeout_s)
    if status is None:
        return Preflight(False, error=f"{base}: {err}")
    if (status == 200 and _is_model_list(body)) or status in (401, 403) or status >= 500:
        return Preflight(True, status)
    for path in INFO_PATHS:  # a native server without /v1/models still passes
        st, info, _, _ = await get_json(session, base + path, timeout_s)
        if st == 200 and isinstance(info, dict):
            return Preflight(True, status)
    reason = _what_was_wrong(status, body, ctype)
    raise NotOpenAIServer(f"not an OpenAI-compatible server ({reason} on {models_url})")
