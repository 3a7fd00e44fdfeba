"""Text that came from outside (a server's JSON, a log, a path), made safe to store and show.

JSON allows `"\\ud83d"`: a lone UTF-16 surrogate, which Python decodes into a `str` that no
UTF-8 writer accepts (pydantic's JSON serializer, a UTF-8 terminal, `report.html`). Such text is
kept, not dropped: each lone surrogate becomes the six characters `\\ud83d`, so the record
still says exactly what the server sent and every layer after this one can write it.
"""

from __future__ import annotations

from typing import Any


def scrub(text: str) -> str:
    """`text` with lone surrogates written as `\\udXXX` escapes (unchanged when there are none)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def scrub_tree(obj: Any) -> Any:
    """`scrub` over every string of a JSON-like tree (dict keys too); other values unchanged."""
    if isinstance(obj, str):
        return scrub(obj)
    if isinstance(obj, dict):
        return {scrub_tree(k): scrub_tree(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [scrub_tree(v) for v in obj]
    return obj
