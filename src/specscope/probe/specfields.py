"""Map what each server reports about speculation for one request onto `ServerSpecFields`.

Servers renamed these fields several times (see reference/observability.md §1b, §2b, §3), so each
reader accepts every known name and keeps the raw dict for later inspection.
"""

from __future__ import annotations

from typing import Any

from specscope.telemetry.llamacpp import all_steps_commit_len
from specscope.trace.model import LLAMACPP_TIMINGS, ServerSpecFields

# SGLang meta_info / sglext names, oldest first within each tuple; first present wins.
_SGLANG_NAMES: dict[str, tuple[str, ...]] = {
    "verify_ct": ("spec_verify_ct", "verify_ct", "num_spec_steps"),
    "accept_length": ("spec_accept_length", "accept_length", "mean_acceptance_length"),
    "accept_rate": ("spec_accept_rate", "accept_rate", "draft_acceptance_rate"),
    "accepted_drafts": (
        "spec_num_correct_drafts",
        "spec_accepted_drafts",
        "spec_accept_token_num",
        "num_correct_drafts",
        "accepted_drafts",
        "num_accepted_draft_tokens",
    ),
    "proposed_drafts": (
        "spec_num_proposed_drafts",
        "spec_proposed_drafts",
        "spec_draft_token_num",
        "num_proposed_drafts",
        "proposed_drafts",
        "num_draft_tokens",
    ),
    "accept_histogram": (
        "spec_correct_drafts_histogram",
        "spec_accept_histogram",
        "correct_drafts_histogram",
        "accept_histogram",
        "acceptance_histogram",
    ),
    "per_step_accepted": ("per_step_accepted",),
    "per_step_drafted": ("per_step_drafted",),
}

_VLLM_NAMES: dict[str, tuple[str, ...]] = {
    "verify_ct": ("num_spec_steps",),
    "accept_length": ("mean_acceptance_length",),
    "accept_rate": ("draft_acceptance_rate",),
    "accepted_drafts": ("num_accepted_draft_tokens",),
    "proposed_drafts": ("num_draft_tokens",),
    "accept_histogram": ("acceptance_histogram",),
    "per_step_accepted": ("per_step_accepted",),
    "per_step_drafted": ("per_step_drafted",),
}


def _int(v: Any) -> int | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _int_list(v: Any) -> list[int] | None:
    if not isinstance(v, list) or not v:
        return None
    out = [_int(x) for x in v]
    if any(x is None for x in out):
        return None
    return [x for x in out if x is not None]


def _pick(obj: dict[str, Any], names: tuple[str, ...]) -> Any:
    for n in names:
        if n in obj and obj[n] is not None:
            return obj[n]
    return None


def _from_names(
    obj: dict[str, Any], names: dict[str, tuple[str, ...]], source: str, raw_keys: set[str]
) -> ServerSpecFields | None:
    if not any(k in obj for k in raw_keys):
        return None
    f = ServerSpecFields(
        verify_ct=_int(_pick(obj, names["verify_ct"])),
        accept_length=_float(_pick(obj, names["accept_length"])),
        accept_rate=_float(_pick(obj, names["accept_rate"])),
        accepted_drafts=_int(_pick(obj, names["accepted_drafts"])),
        proposed_drafts=_int(_pick(obj, names["proposed_drafts"])),
        accept_histogram=_int_list(_pick(obj, names["accept_histogram"])),
        per_step_accepted=_int_list(_pick(obj, names["per_step_accepted"])),
        per_step_drafted=_int_list(_pick(obj, names["per_step_drafted"])),
        source=source,
        raw={k: obj[k] for k in sorted(raw_keys) if k in obj},
    )
    return f


_SGLANG_KEYS = {n for names in _SGLANG_NAMES.values() for n in names if n.startswith("spec_")}
_VLLM_KEYS = {n for names in _VLLM_NAMES.values() for n in names}


def from_sglang_meta(
    meta: dict[str, Any], source: str = "sglang.meta_info"
) -> ServerSpecFields | None:
    """SGLang `meta_info` (native /generate) or `sglext.spec_tokens_details` (OpenAI layer).

    PR #34814's per-step lists (`speculative_decoding_stats.accept_lengths`, read as accepted
    drafts per step as SGLang's internal `accept_length` counts them, without the bonus token;
    `verify_lengths` as drafted per step) are read when present too (unmerged upstream).
    """
    if not isinstance(meta, dict):
        return None
    fields = _from_names(meta, _SGLANG_NAMES, source, _SGLANG_KEYS | {"spec_verify_ct"})
    stats = meta.get("speculative_decoding_stats")
    if isinstance(stats, dict):
        fields = fields or ServerSpecFields(source=source)
        accept = _int_list(stats.get("accept_lengths"))
        verify = _int_list(stats.get("verify_lengths"))
        if accept is not None:
            fields.per_step_accepted = accept
        if verify is not None:
            fields.per_step_drafted = verify
        fields.raw["speculative_decoding_stats"] = stats
    return fields


def from_sglext(sglext: Any) -> ServerSpecFields | None:
    """`sglext.spec_tokens_details` (a dict, or a list of dicts when n > 1: the first is ours)."""
    if not isinstance(sglext, dict):
        return None
    details = sglext.get("spec_tokens_details", sglext)
    if isinstance(details, list):
        details = details[0] if details and isinstance(details[0], dict) else None
    if not isinstance(details, dict):
        return None
    fields = from_sglang_meta(details, source="sglang.sglext")
    if fields is None:
        # Unprefixed names (verify_ct, accept_length, ...) in the OpenAI extension.
        fields = _from_names(
            details,
            _SGLANG_NAMES,
            "sglang.sglext",
            {n for names in _SGLANG_NAMES.values() for n in names},
        )
    return fields


def from_vllm_metrics(metrics: Any) -> ServerSpecFields | None:
    """vLLM `metrics.speculative_decoding` (summary, or detailed with per-step lists)."""
    if not isinstance(metrics, dict):
        return None
    sd = metrics.get("speculative_decoding", metrics)
    if not isinstance(sd, dict):
        return None
    return _from_names(sd, _VLLM_NAMES, "vllm.metrics", _VLLM_KEYS)


def from_llamacpp_timings(timings: Any) -> ServerSpecFields | None:
    """llama.cpp `timings.draft_n` / `draft_n_accepted` (present only when drafting happened).

    Timings with `predicted_n` and no `draft_n` are the server saying that this request drafted
    nothing (a plain server, or n-gram lookup that found nothing to draft): 0 drafts proposed and
    accepted, every step one token. Older llama.cpp builds did not report drafts in `timings` at
    all; against those the client's bursts decide, as they do without timings.

    With `predicted_n` too, the request's verify steps and tokens per step follow, counting the
    steps where nothing was drafted (n-gram speculation often drafts nothing; llama.cpp's own
    `mean len` and `1 + accepted/drafts` leave those steps out and overstate what a client
    sees): steps = predicted_n - 1 - accepted, accept_length = (predicted_n - 1) / steps
    (telemetry.llamacpp.all_steps_commit_len). This is the figure the client's step
    reconstruction is cross-checked against.
    """
    if not isinstance(timings, dict):
        return None
    predicted = _int(timings.get("predicted_n"))
    if "draft_n" in timings:
        drafted, accepted = _int(timings.get("draft_n")), _int(timings.get("draft_n_accepted"))
    elif predicted is not None:
        drafted = accepted = 0
    else:
        return None
    rate = accepted / drafted if drafted and accepted is not None else None
    verify_ct = accept_length = None
    if predicted is not None and accepted is not None:
        accept_length = all_steps_commit_len(predicted, 1, accepted)
        if accept_length is not None:
            verify_ct = predicted - 1 - accepted
    return ServerSpecFields(
        verify_ct=verify_ct,
        accept_length=accept_length,
        accepted_drafts=accepted,
        proposed_drafts=drafted,
        accept_rate=rate,
        source=LLAMACPP_TIMINGS,
        raw={
            k: timings[k]
            for k in ("draft_n", "draft_n_accepted", "predicted_n", "predicted_ms")
            if k in timings
        },
    )


def cached_tokens_from(obj: Any) -> int | None:
    """Prompt tokens served from the server's prefix cache, under any name a server uses:
    OpenAI/vLLM `usage.prompt_tokens_details.cached_tokens`, `usage.cached_tokens`, SGLang
    `meta_info.cached_tokens`, llama.cpp `timings.cache_n`. None when the object says nothing
    (absent is not zero: most servers report nothing unless asked)."""
    if not isinstance(obj, dict):
        return None
    details = obj.get("prompt_tokens_details")
    if isinstance(details, dict) and _int(details.get("cached_tokens")) is not None:
        return _int(details["cached_tokens"])
    for key in ("cached_tokens", "cache_n"):
        if _int(obj.get(key)) is not None:
            return _int(obj[key])
    return None
