"""The registry of line formats and the `--format` groups that select them."""

from __future__ import annotations

from specscope.telemetry.base import LineFormat
from specscope.telemetry.ddtree import AVG_COMMIT, DDTREE
from specscope.telemetry.llamacpp import LLAMACPP_LOG, LLAMACPP_TIMINGS
from specscope.telemetry.sglang import SGLANG_DECODE
from specscope.telemetry.vllm import VLLM_SPEC

LINE_FORMATS: tuple[LineFormat, ...] = (
    DDTREE,
    SGLANG_DECODE,
    VLLM_SPEC,
    LLAMACPP_LOG,
    LLAMACPP_TIMINGS,
    AVG_COMMIT,
)
FORMAT_GROUPS = ("auto", "sglang", "vllm", "llamacpp", "ddtree", "custom")


class UnknownFormatError(ValueError):
    pass


def formats_for(group: str) -> list[LineFormat]:
    """The formats that `--format GROUP` reads (`auto`: all of them; `custom`: none, only
    the user's `--pattern`)."""
    if group not in FORMAT_GROUPS:
        raise UnknownFormatError(f"--format must be one of {', '.join(FORMAT_GROUPS)}, not {group!r}")
    if group == "auto":
        return list(LINE_FORMATS)
    return [f for f in LINE_FORMATS if f.group == group]
