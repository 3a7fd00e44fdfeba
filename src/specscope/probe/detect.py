"""Which server is this? Ask the endpoints each family alone has, in a fixed order.

SGLang: `/get_server_info` (alias `/server_info`); vLLM: `/version` (and `owned_by: "vllm"` in
`/v1/models`); llama.cpp: `/props`; anything else that lists `/v1/models` is plain OpenAI.
Each look-up is a short GET with its own timeout, so detection is bounded in time.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from specscope.trace.text import scrub_tree


@dataclass
class Detection:
    """The answer: flavor, served model (for OpenAI bodies), what the info endpoint said, and
    why. `reachable` False means nothing answered at all (refused, timed out)."""

    flavor: str
    model: str | None = None
    server_info: dict[str, Any] = field(default_factory=dict)
    evidence: str = ""
    reachable: bool = True
    error: str | None = None
    max_context: int | None = None  # the server's context length in tokens, when it says


async def get_json(
    session: aiohttp.ClientSession, url: str, timeout_s: float
) -> tuple[int | None, Any, str | None, str | None]:
    """(status, parsed JSON or None, connection error text or None, content type or None): one
    bounded GET, never raising for a server that misbehaves (the preflight and detection both
    ask through it)."""
    try:
        async with asyncio.timeout(timeout_s):
            async with session.get(url) as resp:
                raw = await resp.content.read(1 << 20)
                try:
                    body = scrub_tree(json.loads(raw))
                except (ValueError, RecursionError):
                    body = None
                return resp.status, body, None, resp.content_type
    except TimeoutError:
        return None, None, f"timed out after {timeout_s:g} s", None
    except aiohttp.ClientConnectorError as e:
        text = (e.os_error.strerror if e.os_error else str(e)) or type(e).__name__
        return None, None, text, None
    except aiohttp.ClientError as e:
        return None, None, f"{type(e).__name__}: {e}", None


def _first_model(models: Any) -> tuple[str | None, str | None]:
    """(id, owned_by) of the first model of an OpenAI `/v1/models` answer."""
    if isinstance(models, dict) and isinstance(models.get("data"), list) and models["data"]:
        m = models["data"][0]
        if isinstance(m, dict):
            mid = m.get("id") if isinstance(m.get("id"), str) else None
            owner = m.get("owned_by") if isinstance(m.get("owned_by"), str) else None
            return mid, owner
    return None, None


async def detect(
    session: aiohttp.ClientSession, base_url: str, *, timeout_s: float = 10.0, flavor: str = "auto"
) -> Detection:
    """Detect the flavor (unless given), look up the served model and the context length."""
    base = base_url.rstrip("/")
    status, models, err, _ = await get_json(session, base + "/v1/models", timeout_s)
    det = await _detect(session, base, timeout_s, flavor, status, models, err)
    det.max_context = max_context_from(det.server_info, models)
    return det


async def _detect(
    session: aiohttp.ClientSession,
    base: str,
    timeout_s: float,
    flavor: str,
    status: int | None,
    models: Any,
    err: str | None,
) -> Detection:
    if status is None:
        return Detection(
            flavor=flavor if flavor != "auto" else "openai", reachable=False, error=f"{base}: {err}"
        )
    model, owner = _first_model(models)
    if flavor != "auto":
        return Detection(flavor=flavor, model=model, evidence="--flavor given")

    for path in ("/get_server_info", "/server_info"):
        st, info, _, _ = await get_json(session, base + path, timeout_s)
        if st == 200 and isinstance(info, dict):
            if "vllm_config" in info or owner == "vllm":
                return Detection("vllm", model, info, f"{path} looks like vLLM's")
            return Detection("sglang", model, info, f"{path} answered (SGLang)")
    st, info, _, _ = await get_json(session, base + "/props", timeout_s)
    if (
        st == 200
        and isinstance(info, dict)
        and ("default_generation_settings" in info or "build_info" in info or "total_slots" in info)
    ):
        return Detection("llamacpp", model, info, "/props answered (llama.cpp)")
    st, info, _, _ = await get_json(session, base + "/version", timeout_s)
    if st == 200 and isinstance(info, dict) and "version" in info and owner in (None, "vllm"):
        return Detection("vllm", model, info, "/version answered (vLLM)")
    if owner == "vllm":
        return Detection("vllm", model, {}, "/v1/models owned_by vllm")
    if owner == "llamacpp":
        return Detection("llamacpp", model, {}, "/v1/models owned_by llamacpp")
    if owner == "sglang":
        return Detection("sglang", model, {}, "/v1/models owned_by sglang")
    if status == 200:
        return Detection("openai", model, {}, "/v1/models answered; no server-specific endpoint")
    return Detection(
        "openai",
        model,
        {},
        f"no known info endpoint (/v1/models gave HTTP {status}); assuming OpenAI-compatible",
    )


def max_context_from(server_info: dict[str, Any], models: Any = None) -> int | None:
    """The server's context length where it says it: SGLang /get_server_info `context_length`,
    vLLM /v1/models `max_model_len`, llama.cpp /props `n_ctx`. None when unknown."""
    cands: list[Any] = [
        server_info.get("context_length"),
        server_info.get("max_context"),
        server_info.get("max_model_len"),
    ]
    dgs = server_info.get("default_generation_settings")
    if isinstance(dgs, dict):
        cands.append(dgs.get("n_ctx"))
    cands.append(server_info.get("n_ctx"))
    if isinstance(models, dict) and isinstance(models.get("data"), list) and models["data"]:
        m = models["data"][0]
        if isinstance(m, dict):
            cands += [m.get("max_model_len"), m.get("context_length")]
    for c in cands:
        if isinstance(c, int) and not isinstance(c, bool) and c > 0:
            return c
    return None
