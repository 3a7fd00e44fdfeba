"""The probe summary: one dict of numbers over a set of request traces. Pure: no I/O.

`decode_tps` is token-weighted: over the successful requests, the sum of tokens after each
request's first token-bearing chunk divided by the sum of the times from that chunk to the last
(`RequestTrace.decode_window`), so prefill and queueing never leak into it and long requests
weigh by their tokens.

`mean_commit_len` comes from the server's own per-request speculation fields when present
(token-weighted over requests), else from client steps judged reliable, else None.
`mean_step_s` comes from reliable client step times, else is derived from the identity
`decode_tps = mean_commit_len / mean_step_s` when both of those are known, else None; the
`*_source` keys say which.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from specscope.analysis.steps import StepReconstruction, reconstruct_steps, server_mean_commit_len
from specscope.analysis.workload_summary import workload_keys
from specscope.trace.model import RequestTrace


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else None


def _round(v: float | None, nd: int = 12) -> float | None:
    """Trim float noise only; consumers get full precision."""
    return None if v is None else round(v, nd)


def _server_steps(trace: RequestTrace) -> float | None:
    """Verify steps of one request according to the server (None when it did not say)."""
    f = trace.server_spec
    if f is None:
        return None
    if f.per_step_accepted:
        return float(len(f.per_step_accepted))
    if f.verify_ct:
        return float(f.verify_ct)
    mcl = server_mean_commit_len(trace)
    if mcl and trace.completion_tokens:
        return trace.completion_tokens / mcl
    return None


def summarize(
    traces: Sequence[RequestTrace],
    *,
    max_commit_len: int | None = None,
    reconstructions: Sequence[StepReconstruction] | None = None,
) -> dict[str, Any]:
    """Summary of a probe run. `reconstructions` (aligned with `traces`) may be passed in when
    the caller already computed them."""
    ok = [t for t in traces if t.ok]
    failed = [t for t in traces if not t.ok]
    recs = (
        list(reconstructions)
        if reconstructions is not None
        else [reconstruct_steps(t, max_commit_len=max_commit_len) for t in traces]
    )
    ok_recs = [r for t, r in zip(traces, recs, strict=False) if t.ok]

    ttfts = [v for t in ok if (v := t.ttft_s) is not None]
    e2es = [v for t in ok if (v := t.e2e_s) is not None]
    windows = [w for t in ok if (w := t.decode_window()) is not None]
    dec_tokens = sum(w[0] for w in windows)
    dec_seconds = sum(w[1] for w in windows)
    decode_tps = dec_tokens / dec_seconds if dec_seconds > 0 else None
    per_req_tps = [w[0] / w[1] for w in windows]

    gaps: list[float] = []
    chunk_sizes: list[int] = []
    for t in ok:
        tc = [c for c in t.chunks if c.n_tokens > 0]
        chunk_sizes += [c.n_tokens for c in tc]
        gaps += [(b.t_ns - a.t_ns) / 1e9 for a, b in itertools.pairwise(tc)]

    # Commit length: server first (token-weighted), else reliable client steps.
    srv_tokens = 0.0
    srv_steps = 0.0
    for t in ok:
        steps = _server_steps(t)
        mcl = server_mean_commit_len(t)
        if steps and mcl:
            srv_tokens += mcl * steps  # weights each request by its steps: total tokens / steps
            srv_steps += steps
    reliable = [r for r in ok_recs if r.reliable and r.steps]
    cl_commit = sum(r.total_commit for r in reliable)
    cl_steps = sum(len(r.steps) for r in reliable)
    if srv_steps > 0:
        mean_commit, commit_src = srv_tokens / srv_steps, "server"
    elif cl_steps > 0:
        mean_commit, commit_src = cl_commit / cl_steps, "client"
    else:
        mean_commit, commit_src = None, None

    timed = [s.step_s for r in reliable if r.timed_by_client for s in r.steps]
    if timed and all(v > 0 for v in timed):
        mean_step, step_src = sum(timed) / len(timed), "client"
    elif mean_commit is not None and decode_tps:
        mean_step, step_src = mean_commit / decode_tps, "derived"
    else:
        mean_step, step_src = None, None

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

    reasons = Counter(r.reason for r in ok_recs if not r.reliable)
    checks = Counter(r.cross_check for r in ok_recs if r.cross_check)
    return {
        "requests": len(traces),
        "ok": len(ok),
        "errors": len(failed),
        "error_kinds": dict(Counter(t.error.kind for t in failed if t.error)),
        "ttft_s_p50": _round(_pct(ttfts, 50)),
        "ttft_s_p99": _round(_pct(ttfts, 99)),
        "e2e_s_p50": _round(_pct(e2es, 50)),
        "e2e_s_p99": _round(_pct(e2es, 99)),
        "decode_tps": _round(decode_tps),
        "decode_tps_p50": _round(_pct(per_req_tps, 50)),
        "completion_tokens": sum(t.completion_tokens or 0 for t in ok),
        "chunk_gap_s_p50": _round(_pct(gaps, 50)),
        "chunk_gap_s_p99": _round(_pct(gaps, 99)),
        "tokens_per_chunk_mean": _round(sum(chunk_sizes) / len(chunk_sizes))
        if chunk_sizes
        else None,
        "mean_commit_len": _round(mean_commit),
        "mean_commit_len_source": commit_src,
        "mean_step_s": _round(mean_step),
        "mean_step_s_source": step_src,
        "steps": {
            "methods": dict(Counter(r.method for r in ok_recs)),
            "reliable_requests": sum(1 for r in ok_recs if r.reliable),
            "unreliable_reasons": [{"reason": k, "requests": v} for k, v in reasons.most_common(5)],
            "cross_checks": [{"result": k, "requests": v} for k, v in checks.most_common(5)],
        },
        "token_count_sources": dict(Counter(t.token_count_source for t in ok)),
        "server_spec": server_block,
        **workload_keys(traces, recs),
    }
