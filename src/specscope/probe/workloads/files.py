"""`--workload FILE`: prompts a user brings, as JSONL (or one JSON array).

One record per line, any of:
- `{"prompt": "..."}` (or `"text"`), or a bare JSON string: a completion prompt;
- `{"messages": [{"role": "user", "content": "..."}, ...]}`: OpenAI chat messages;
- `{"conversations": [{"from": "human", "value": "..."}, ...]}`: ShareGPT (`from` human, gpt,
  system; trailing assistant turns are dropped so the model answers the last human turn).
A record may carry `"category"` (default "file"). Bad input is a `WorkloadError` naming the line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class WorkloadError(Exception):
    """A workload name or file that cannot be used; the message says why (exit 2)."""


_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "system": "system",
}


@dataclass(frozen=True)
class FilePrompt:
    text: str | None
    messages: tuple[tuple[str, str], ...] | None
    category: str


def _messages(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise WorkloadError(f"{where}: `messages` must be a non-empty list")
    out = []
    for i, msg in enumerate(value):
        if (
            not isinstance(msg, dict)
            or not isinstance(msg.get("role"), str)
            or not isinstance(msg.get("content"), str)
        ):
            raise WorkloadError(f"{where}: message {i} needs string `role` and `content`")
        out.append((msg["role"], msg["content"]))
    return tuple(out)


def _sharegpt(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise WorkloadError(f"{where}: `conversations` must be a non-empty list")
    out = []
    for i, turn in enumerate(value):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise WorkloadError(f"{where}: turn {i} needs a string `value`")
        role = _SHAREGPT_ROLES.get(str(turn.get("from", "")).lower())
        if role is None:
            raise WorkloadError(
                f"{where}: turn {i} has an unknown `from` {turn.get('from')!r} "
                "(expected human, gpt or system)"
            )
        out.append((role, turn["value"]))
    while out and out[-1][0] == "assistant":
        out.pop()
    if not any(r == "user" for r, _ in out):
        raise WorkloadError(f"{where}: the conversation has no human turn")
    return tuple(out)


def _record(obj: Any, where: str) -> FilePrompt:
    if isinstance(obj, str):
        obj = {"prompt": obj}
    if not isinstance(obj, dict):
        raise WorkloadError(f"{where}: expected a JSON object or string, got {type(obj).__name__}")
    category = obj.get("category", "file")
    if not isinstance(category, str) or not category:
        raise WorkloadError(f"{where}: `category` must be a non-empty string")
    if "messages" in obj:
        return FilePrompt(None, _messages(obj["messages"], where), category)
    if "conversations" in obj:
        return FilePrompt(None, _sharegpt(obj["conversations"], where), category)
    for key in ("prompt", "text"):
        if key in obj:
            if not isinstance(obj[key], str) or not obj[key].strip():
                raise WorkloadError(f"{where}: `{key}` must be a non-empty string")
            return FilePrompt(obj[key], None, category)
    raise WorkloadError(
        f"{where}: no `prompt`, `messages` or `conversations` key "
        f"(keys: {', '.join(sorted(obj)) or 'none'})"
    )


def load_file(path: Path) -> list[FilePrompt]:
    """Every prompt of a JSONL (or JSON array) file, or a WorkloadError naming the problem."""
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise WorkloadError(f"--workload {path}: not UTF-8 text") from None
    except OSError as e:
        raise WorkloadError(f"--workload {path}: cannot read: {e.strerror or e}") from None
    if not raw.strip():
        raise WorkloadError(f"--workload {path}: the file is empty")
    if raw.lstrip().startswith("["):
        try:
            items = json.loads(raw)
        except (json.JSONDecodeError, RecursionError) as e:
            raise WorkloadError(f"--workload {path}: not valid JSON: {e}") from None
        return [_record(x, f"--workload {path}: item {i}") for i, x in enumerate(items)]
    out = []
    for no, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        where = f"--workload {path}: line {no}"
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as e:
            raise WorkloadError(f"{where}: not valid JSON ({e.msg})") from None
        out.append(_record(obj, where))
    return out
