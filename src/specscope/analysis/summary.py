"""The probe summary: one dict of numbers over a set of request traces. Pure: no I/O.

The headline figures (decode tps, commit length, step time, TTFT, their sources and intervals)
come from analysis.headline, the one owner of those numbers, over the successful requests; this
module adds the distribution figures a probe prints (percentiles, chunk gaps, server fields).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from specscope.analysis.headline.headline import Headline, guarded_headline
from specscope.analysis.headline.measure import cut_short
from specscope.analysis.steps.reconstruct import StepReconstruction, reconstruct_steps
from specscope.analysis.steps.speculation import as_stated, state_of_requests
from specscope.analysis.workload.keys import workload_keys
from specscope.telemetry.records import SpecRecord
from specscope.trace.model import RequestTrace


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else None


def _round(v: float | None, nd: int = 12) -> float | None:
    """Trim float noise only; consumers get full precision."""
    return None if v is None else round(v, nd)


def _chunks(ok: Sequence[RequestTrace]) -> tuple[list[float], list[int]]:
    """(gaps between token-bearing chunks, tokens per chunk) over the requests: how the stream
    arrived, whatever the steps were."""
    gaps: list[float] = []
    chunk_sizes: list[int] = []
    for t in ok:
        tc = [c for c in t.chunks if c.n_tokens > 0]
        chunk_sizes += [c.n_tokens for c in tc]
        gaps += [(b.t_ns - a.t_ns) / 1e9 for a, b in itertools.pairwise(tc)]
    return gaps, chunk_sizes


def _server_block(ok: Sequence[RequestTrace]) -> dict[str, Any] | None:
    """The server's own speculation fields summed over the requests that carry them, beside the
    client's figures; None without any."""
    spec = [t.server_spec for t in ok if t.server_spec is not None]
    accepted = [f.accepted_drafts for f in spec if f.accepted_drafts is not None]
    proposed = [f.proposed_drafts for f in spec if f.proposed_drafts is not None]
    server_block: dict[str, Any] | None = None
    if spec:
        server_block = {
            "requests_with_fields": len(spec),
            "sources": sorted({f.source for f in spec if f.source}),
            "accepted_drafts": sum(accepted) if accepted else None,
            "proposed_drafts": sum(proposed) if proposed else None,
            "accept_rate": (
                sum(accepted) / sum(proposed)
                if accepted and proposed and sum(proposed) > 0
                else None
            ),
            "verify_ct": sum(f.verify_ct for f in spec if f.verify_ct) or None,
            "per_step_data": any(f.per_step_accepted for f in spec),
        }
    return server_block


def _steps_block(ok_recs: Sequence[StepReconstruction], head: Headline) -> dict[str, Any]:
    """How the steps were read and why some were not trusted: the evidence behind the commit
    length's source."""
    reasons = Counter(r.reason for r in ok_recs if not r.reliable)
    checks = Counter(r.cross_check for r in ok_recs if r.cross_check)
    return {
        "methods": dict(Counter(r.method for r in ok_recs)),
        "reliable_requests": sum(1 for r in ok_recs if r.reliable),
        "unreliable_reasons": [{"reason": k, "requests": v} for k, v in reasons.most_common(5)],
        "cross_checks": [{"result": k, "requests": v} for k, v in checks.most_common(5)],
        "commit_len_detail": head.commit_len_detail,
    }


def _measured(
    finished: list[RequestTrace], traces: Sequence[RequestTrace]
) -> tuple[list[RequestTrace], list[str]]:
    """The requests the headline reads and a note when they are not the finished ones: with
    none finished (Ctrl-C before any did), what the cut ones streamed is the reading."""
    if finished:
        return finished, []
    cut = cut_short(traces)
    if not cut:
        return [], []
    return cut, [f"no request finished: the {len(cut)} cut short by Ctrl-C are measured"]


def summarize(
    traces: Sequence[RequestTrace],
    *,
    max_commit_len: int | None = None,
    reconstructions: Sequence[StepReconstruction] | None = None,
    server_info: dict[str, Any] | None = None,
    client: Sequence[dict[str, Any]] = (),
    telemetry: Sequence[SpecRecord] = (),
) -> dict[str, Any]:
    """Summary of a probe run. `reconstructions` (aligned with `traces`) may be passed in when
    the caller already computed them; `server_info` (the server's info endpoint) is evidence for
    the speculation state; `client` the client's loop-lag samples (client.jsonl), for its
    health (`client`, null without samples); `telemetry` the server's records about the run
    (probe --metrics-url: the Prometheus run delta, whose engine-timed steps the headline holds
    the stream's against)."""
    finished = [t for t in traces if t.ok]
    failed = [t for t in traces if not t.ok]
    ok, cut_note = _measured(finished, traces)
    recs = (
        list(reconstructions)
        if reconstructions is not None
        else [reconstruct_steps(t, max_commit_len=max_commit_len) for t in traces]
    )
    speculation = state_of_requests(server_info or {}, traces, recs)
    recs = as_stated(speculation, recs)
    measured = {t.index for t in ok}
    ok_recs = [r for t, r in zip(traces, recs, strict=False) if t.index in measured]

    ttfts = [v for t in ok if (v := t.ttft_s) is not None]
    e2es = [v for t in ok if (v := t.e2e_s) is not None]
    windows = [w for t in ok if (w := t.decode_window()) is not None]
    per_req_tps = [w[0] / w[1] for w in windows]
    head, health = guarded_headline(ok, ok_recs, client, telemetry=telemetry)

    gaps, chunk_sizes = _chunks(ok)
    server_block = _server_block(ok)
    return {
        "requests": len(traces),
        "ok": len(finished),
        "errors": len(failed),
        "error_kinds": dict(Counter(t.error.kind for t in failed if t.error)),
        "ttft_s_p50": _round(_pct(ttfts, 50)),
        "ttft_s_p99": _round(_pct(ttfts, 99)),
        "e2e_s_p50": _round(_pct(e2es, 50)),
        "e2e_s_p99": _round(_pct(e2es, 99)),
        "speculation": speculation.label,
        "speculation_reason": speculation.reason,
        "decode_tps": _round(head.decode_tps),
        "decode_tps_p50": _round(_pct(per_req_tps, 50)),
        "completion_tokens": sum(t.completion_tokens or 0 for t in ok),
        "chunk_gap_s_p50": _round(_pct(gaps, 50)),
        "chunk_gap_s_p99": _round(_pct(gaps, 99)),
        "tokens_per_chunk_mean": _round(sum(chunk_sizes) / len(chunk_sizes))
        if chunk_sizes
        else None,
        **{
            k: _round(v) if isinstance(v, float) else v
            for k, v in head.json_fields().items()
            if k != "decode_tps"
        },
        "headline_notes": [*head.notes, *cut_note],
        "steps": _steps_block(ok_recs, head),
        "token_count_sources": dict(Counter(t.token_count_source for t in ok)),
        "server_spec": server_block,
        **workload_keys(traces, recs),
        "client": None if health is None else health.to_json(),
    }
