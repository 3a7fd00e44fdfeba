"""Did the server's prefix cache serve any prompt? Pure: from request traces only.

Why: a cache hit turns prefill into a lookup, so TTFT collapses and any method that cancels
prefill by subtracting end-to-end times (the two-point rate) is broken. The probe makes every
prompt unique unless asked not to; this says whether that held and what the server reported.

Evidence, strongest first: the server's own count (`RequestTrace.cached_tokens`, from
`usage.prompt_tokens_details.cached_tokens` and its aliases): a hit is a request with more
than CACHED_TOKENS_HIT tokens served from cache. Then the TTFT of repeats: among requests that
sent the same prompt, a later one whose TTFT is below REPEAT_TTFT_RATIO of the first one's is
counted as a likely hit. Result: {"hits", "requests", "cached_tokens", "evidence"} (the
contract's `prefix_cache`), or None when no request succeeded.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import Any

from specscope.trace.model import RequestTrace

#: A few tokens are often reused even across unrelated prompts (a BOS, a chat template's
#: system block): more than this many counts as a hit of the prompt's own text.
CACHED_TOKENS_HIT = 16
REPEAT_TTFT_RATIO = 0.5


def _prompt_key(t: RequestTrace) -> str:
    p = t.spec.prompt
    return p if isinstance(p, str) else json.dumps(p, sort_keys=True)


def prefix_cache(traces: Sequence[RequestTrace]) -> dict[str, Any] | None:
    ok = [t for t in traces if t.ok]
    if not ok:
        return None
    reported = [t for t in ok if t.cached_tokens is not None]
    groups: dict[str, list[RequestTrace]] = {}
    for t in ok:
        groups.setdefault(_prompt_key(t), []).append(t)
    repeats = [g for g in groups.values() if len(g) > 1]
    unique = len(groups) == len(ok)
    if reported:
        hits = sum(1 for t in reported if (t.cached_tokens or 0) > CACHED_TOKENS_HIT)
        total = sum(t.cached_tokens or 0 for t in reported)
        evidence = (
            f"server reported cached prompt tokens on {len(reported)} of {len(ok)} "
            f"requests; {hits} served more than {CACHED_TOKENS_HIT} tokens from cache "
            f"({total} in all)"
        )
        if hits and unique:
            evidence += (
                "; every prompt was unique, so these hits are of a shared template or prefix"
            )
        return {"hits": hits, "requests": len(ok), "cached_tokens": total, "evidence": evidence}
    if not repeats:
        return {
            "hits": 0,
            "requests": len(ok),
            "cached_tokens": None,
            "evidence": "every prompt was different from its first line (the probe starts each "
            "with a per-run reference), so a prefix cache had nothing to serve; "
            "the server reported no cached token counts",
        }
    hits, firsts, laters = 0, [], []
    for g in repeats:
        g = sorted(g, key=lambda t: t.t_send_ns)
        first = g[0].ttft_s
        if first is None or first <= 0:
            continue
        firsts.append(first)
        for t in g[1:]:
            if t.ttft_s is not None:
                laters.append(t.ttft_s)
                hits += t.ttft_s < REPEAT_TTFT_RATIO * first
    if not laters:
        evidence = f"{len(repeats)} repeated prompt(s), but no TTFT to compare"
    else:
        evidence = (
            f"{len(repeats)} prompt(s) sent more than once (--same-prompt or a file): "
            f"repeat TTFT median {statistics.median(laters):.3f} s vs first "
            f"{statistics.median(firsts):.3f} s; {hits} repeat(s) below "
            f"{REPEAT_TTFT_RATIO:.0%} of their first (likely cache hits; a cold first "
            "request can be slow from warm-up alone)"
        )
    return {"hits": hits, "requests": len(ok), "cached_tokens": None, "evidence": evidence}
