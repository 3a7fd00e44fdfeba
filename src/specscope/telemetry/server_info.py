"""SGLang `/get_server_info` (`/server_info` in newer builds): `avg_spec_accept_length`.

It is a server-lifetime average (total accepted tokens / total verify forwards since start),
so it is reported with scope `lifetime`: it answers "what has this server done", not "what did
my run see" — diff two readings or restart the server to isolate a run (observability.md §1c).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from specscope.telemetry.records import SpecRecord

PATHS = ("/get_server_info", "/server_info")


def max_commit_len_from(server_info: dict[str, Any]) -> int | None:
    """Upper bound of tokens per verify step when the server's info says it (SGLang's
    `speculative_num_draft_tokens` counts the current token, so it bounds drafts + 1; the
    `speculative_num_steps` chain depth bounds it as steps + 1). Used for coalescing detection."""
    for key, extra in (
        ("speculative_num_draft_tokens", 0),
        ("num_draft_tokens", 0),
        ("speculative_num_steps", 1),
    ):
        v = server_info.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v + extra
    return None


class ServerInfoError(Exception):
    """The endpoint could not be read or returned no JSON object (one-line message)."""


def parse_server_info(info: Any, t_unix: float | None = None, source: str = "") -> list[SpecRecord]:
    """One `lifetime` record per DP rank that reports `avg_spec_accept_length` (top-level in
    old builds, `internal_states[i]` in newer ones, `decode[i]` in PD mode)."""
    if not isinstance(info, dict):
        return []
    states: list[Any] = []
    for key in ("internal_states", "decode"):
        value = info.get(key)
        if isinstance(value, list):
            states.extend(value)
    if "avg_spec_accept_length" in info:
        states.insert(0, info)
    out = []
    for i, state in enumerate(states):
        if not isinstance(state, dict):
            continue
        value = state.get("avg_spec_accept_length")
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            continue
        out.append(
            SpecRecord(
                format="server_info",
                ts=time.time() if t_unix is None else t_unix,
                rank=f"DP{i}",
                commit_len=float(value),
                accepted_drafts=float(value) - 1.0,
                scope="lifetime",
                fields={
                    "note": "server-lifetime average since start, not this run",
                    **{
                        k: state[k]
                        for k in ("last_gen_throughput", "memory_usage", "load")
                        if k in state and isinstance(state[k], int | float | str)
                    },
                },
                source=source,
            )
        )
    return out


def fetch_server_info(base_url: str, timeout_s: float = 5.0) -> list[SpecRecord]:
    """GET the server-info endpoint (trying both paths) and parse it."""
    last = ""
    for path in PATHS:
        url = base_url.rstrip("/") + path
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:
                body = resp.read(8 << 20)
        except urllib.error.HTTPError as exc:
            last = f"{url}: HTTP {exc.code}"
            continue
        except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
            raise ServerInfoError(f"{url}: cannot read ({getattr(exc, 'reason', exc)})") from None
        try:
            return parse_server_info(json.loads(body), source=url)
        except ValueError:
            raise ServerInfoError(f"{url}: response is not JSON") from None
    raise ServerInfoError(last or f"{base_url}: no server-info endpoint")
