"""Prometheus `/metrics` speculation counters and gauges, scraped before and after a run.

Counters (vLLM `vllm:spec_decode_*`, llama.cpp `llamacpp:spec_decode_*` and the older
`llamacpp:n_drafted*`) are cumulative for the whole server, so a run's acceptance is the delta
of two scrapes — and that delta still includes any other traffic the server served meanwhile
(records say `server_wide: true`). SGLang exposes gauges instead (`sglang:spec_accept_length`,
`sglang:spec_accept_rate`), set at each decode log interval: the value after the run is the
last interval's, not the run's. Parsing uses prometheus_client's own text parser.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from specscope.telemetry.records import SpecRecord

MAX_BYTES = 32 << 20

# Canonical counter -> names used by the engines (sample names, `_total` included).
_COUNTERS = {
    "drafts": ("vllm:spec_decode_num_drafts_total", "llamacpp:spec_decode_num_drafts_total"),
    "draft_tokens": (
        "vllm:spec_decode_num_draft_tokens_total",
        "llamacpp:spec_decode_num_draft_tokens_total",
        "llamacpp:n_drafted_total",
        "llamacpp:n_draft_total",
        "sglang:spec_proposed_drafts_total",
    ),
    "accepted_tokens": (
        "vllm:spec_decode_num_accepted_tokens_total",
        "llamacpp:spec_decode_num_accepted_tokens_total",
        "llamacpp:n_drafted_accepted_total",
        "llamacpp:n_draft_accepted_total",
        "sglang:spec_accepted_drafts_total",
    ),
    # specscope's own server (serve/metrics.py) also counts SGLang-style verify steps and
    # committed tokens (bonus included); upstream SGLang only has the two gauges.
    "verify_steps": ("sglang:spec_verify_steps_total",),
    "commit_tokens": ("sglang:spec_accept_tokens_total",),
    # vLLM's all-steps counters (reference/vllm-cpu.md §7): one inter-token-latency observation
    # per output event, i.e. per decode step whether it drafted or not, so
    # (generation tokens - requests) / observations is the all-steps commit length and
    # sum / count the mean step time. SGLang's histogram of the same name is weighted per token
    # (interval / tokens, once per token), so it is not read.
    "generation_tokens": ("vllm:generation_tokens_total",),
    "finished_requests": ("vllm:request_success_total",),
    "itl_count": ("vllm:inter_token_latency_seconds_count",),
    "itl_sum": ("vllm:inter_token_latency_seconds_sum",),
}
_PER_POS = (
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    "llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
)
_GAUGES = {"sglang:spec_accept_length": "accept_length", "sglang:spec_accept_rate": "accept_rate"}


class MetricsError(Exception):
    """The endpoint could not be read or did not return Prometheus text (one-line message)."""


@dataclass
class MetricsSnapshot:
    """The speculation series of one scrape, summed over label sets (engines, models)."""

    t_unix: float
    engine: str | None = None  # vllm | llamacpp | sglang
    counters: dict[str, float] = field(default_factory=dict)  # canonical name -> value
    per_position: dict[int, float] = field(default_factory=dict)
    gauges: dict[str, list[float]] = field(default_factory=dict)  # sglang, one per rank series
    url: str = ""


def parse_metrics_text(text: str, t_unix: float | None = None, url: str = "") -> MetricsSnapshot:
    """Prometheus text -> snapshot; raises MetricsError when the text does not parse."""
    snap = MetricsSnapshot(t_unix=time.time() if t_unix is None else t_unix, url=url)
    sums: dict[str, float] = defaultdict(float)
    per_pos: dict[int, float] = defaultdict(float)
    gauges: dict[str, list[float]] = defaultdict(list)
    name_to_canon = {n: c for c, names in _COUNTERS.items() for n in names}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name
                if name in name_to_canon:
                    canon = name_to_canon[name]
                    sums[canon] += sample.value
                    snap.engine = snap.engine or name.split(":", 1)[0]
                elif name in _PER_POS:
                    try:
                        pos = int(sample.labels.get("position", ""))
                    except ValueError:
                        continue
                    per_pos[pos] += sample.value
                elif name in _GAUGES:
                    gauges[_GAUGES[name]].append(sample.value)
                    snap.engine = snap.engine or "sglang"
    except Exception as exc:  # the parser raises ValueError/TypeError/IndexError on bad text
        raise MetricsError(
            f"{url or 'metrics'}: not Prometheus text ({type(exc).__name__}: {exc})"
        ) from None
    snap.counters = dict(sums)
    snap.per_position = dict(per_pos)
    snap.gauges = dict(gauges)
    return snap


def scrape_metrics(url: str, timeout_s: float = 5.0) -> MetricsSnapshot:
    """GET `url` (a /metrics endpoint) and parse it. Raises MetricsError with one line."""
    t = time.time()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body = resp.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise MetricsError(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise MetricsError(f"{url}: cannot scrape ({reason})") from None
    return _snapshot(body, t, url)


async def fetch_metrics(url: str, timeout_s: float = 5.0) -> MetricsSnapshot:
    """scrape_metrics on the event loop (aiohttp): what a loop that scrapes while it runs
    uses. A cancelled scrape stops at once; one in a thread (asyncio.to_thread) ran on to its
    timeout, and `asyncio.run` waited for it at exit (Ctrl-C during a scrape of a hung server
    took up to `timeout_s`). Raises MetricsError with one line."""
    t = time.time()
    try:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url) as resp,
        ):
            status = resp.status
            body = bytearray()
            async for chunk in resp.content.iter_chunked(1 << 16):
                body += chunk
                if len(body) > MAX_BYTES:
                    break
    except TimeoutError:
        raise MetricsError(f"{url}: cannot scrape (no answer within {timeout_s:g} s)") from None
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        raise MetricsError(f"{url}: cannot scrape ({str(exc) or type(exc).__name__})") from None
    if status >= 400:
        raise MetricsError(f"{url}: HTTP {status}")
    return _snapshot(bytes(body), t, url)


def _snapshot(body: bytes, t: float, url: str) -> MetricsSnapshot:
    if len(body) > MAX_BYTES:
        raise MetricsError(f"{url}: response larger than {MAX_BYTES} bytes")
    return parse_metrics_text(body.decode("utf-8", "replace"), t, url)


def metrics_delta(before: MetricsSnapshot, after: MetricsSnapshot) -> list[SpecRecord]:
    """Run-scoped records from two scrapes.

    Counters give one `run_delta` record (commit length = 1 + accepted / drafts, accept rate =
    accepted / draft tokens, per-position rates = accepted at position / drafts), flagged
    `server_wide` because other clients' traffic is included. A counter that went down means
    the server restarted between the scrapes: no delta is reported for it. SGLang gauges give
    one `interval` record (the last decode-log window before `after`), not a run figure.
    """
    out: list[SpecRecord] = []
    notes: list[str] = []
    delta: dict[str, float] = {}
    for name, value in after.counters.items():
        if name not in before.counters:
            notes.append(f"{name} absent before the run")
            continue
        d = value - before.counters[name]
        if d < 0:
            notes.append(f"{name} went down (server restarted?)")
            continue
        delta[name] = d
    if delta:
        drafts = delta.get("drafts")
        accepted = delta.get("accepted_tokens")
        draft_tokens = delta.get("draft_tokens")
        if not drafts and delta.get("verify_steps"):
            drafts = delta["verify_steps"]
            commit = delta["commit_tokens"] / drafts if "commit_tokens" in delta else None
        else:
            commit = 1.0 + accepted / drafts if drafts and accepted is not None else None
        per_pos = None
        if drafts and after.per_position:
            per_pos = [
                (after.per_position[p] - before.per_position.get(p, 0.0)) / drafts
                for p in sorted(after.per_position)
            ]
        out.append(
            SpecRecord(
                format="prometheus",
                ts=after.t_unix,
                commit_len=commit,
                accepted_drafts=None if commit is None else commit - 1.0,
                accept_rate=accepted / draft_tokens
                if draft_tokens and accepted is not None
                else None,
                n_steps=int(drafts) if drafts else None,
                per_position=per_pos,
                scope="run_delta",
                fields={
                    "engine": after.engine,
                    "delta": delta,
                    "window_s": after.t_unix - before.t_unix,
                    "server_wide": True,
                    "note": "counters are server-wide: traffic from other clients during the "
                    "run is included",
                    "problems": notes,
                },
                source=after.url,
            )
        )
    if after.gauges:
        length = after.gauges.get("accept_length") or []
        rate = after.gauges.get("accept_rate") or []
        out.append(
            SpecRecord(
                format="prometheus",
                ts=after.t_unix,
                commit_len=sum(length) / len(length) if length else None,
                accepted_drafts=(sum(length) / len(length) - 1.0) if length else None,
                accept_rate=sum(rate) / len(rate) if rate else None,
                scope="interval",
                fields={
                    "engine": "sglang",
                    "series": len(length),
                    "note": "sglang gauges hold the last decode-log interval, not the run",
                },
                source=after.url,
            )
        )
    return out
