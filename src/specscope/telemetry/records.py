"""The typed record every telemetry parser yields, whatever the server.

One shape for all formats so that analysis can weigh them together: a record is either one
verify step (`n_steps == 1`, e.g. a DDTREE metrics line) or a summary over many steps (a SGLang
`Decode batch` line over its log interval, a vLLM interval, a Prometheus delta, a llama.cpp
request's timings) with `n_steps` its weight when known.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class SpecRecord(BaseModel):
    format: str  # sglang_decode | ddtree | avg_commit | vllm_spec | llamacpp_log | llamacpp_timings | prometheus | server_info | custom
    ts: float | None = None  # unix seconds (log timestamp), None when the line has none
    rank: str | None = None  # e.g. "TP0"
    request_id: str | None = None
    step: int | None = None
    commit_len: float | None = None  # tokens per verify step including the bonus token
    accepted_drafts: float | None = None  # commit_len - 1 for per-step records
    accept_rate: float | None = None  # accepted / proposed drafts
    n_steps: int | None = None  # verify steps this record covers (1 = one step)
    per_position: list[float] | None = None  # acceptance rate by draft position
    scope: str = "interval"  # step | interval | request | lifetime | run_delta
    fields: dict[str, Any] = Field(default_factory=dict)  # every other parsed field, typed
    line_no: int | None = None
    source: str = ""  # file name, "-", or the command
