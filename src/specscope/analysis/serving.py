"""Serving metrics as load generators print them, named so that a speculative server's two
latencies cannot be confused. Pure: no I/O.

Per request (client clock, `RequestTrace`):
- `ttft_s`  send -> first token-bearing chunk;
- `tpot_s`  decode time per output token, TTFT excluded: (last token chunk - first token chunk)
            / (output tokens - 1); vLLM's `request_time_per_output_token_seconds`, aiperf's
            "inter token latency", guidellm's `inter_token_latency_ms`;
- `e2e_s`   send -> end of the stream;
- `output_tps`  output tokens / e2e (what the user sees, TTFT included; guidellm's per-request
            `output_tokens_per_second`); `decode_tps` = 1 / TPOT (aiperf's "per user" rate).

Per reconstructed verify step (`analysis.steps`), whose latency was timed by the client:
- `inter_step_latency_s`   one sample per step: the gap before it (vLLM's Prometheus
            `inter_token_latency_seconds`, which observes once per output event; evalscope's
            and `vllm bench serve`'s per-chunk "ITL" when one chunk is one step);
- `inter_token_latency_s`  one sample per token: each step's gap spread evenly over the tokens
            it committed (SGLang's Prometheus convention, genai-perf's chunked ITL).
Over the same steps, exactly: mean per step = mean per token x mean commit length (the
`per_step_relation` block shows the three numbers). Percentiles do not obey that identity.
- `inter_chunk_latency_s`  raw gaps between token-bearing chunks (aiperf's ICL): what a tool
  that does not reconstruct steps sees.

Per group of requests (the run's main measurement, and each concurrency level): request
throughput = successful requests / wall span (first send -> last end), output throughput =
output tokens / that span, and goodput under latency SLOs: the share of requests (failed ones
count as missing) that meet every SLO, and those requests per second.

Distributions carry p1 p5 p25 p50 p75 p90 p95 p99, mean, std (population, as numpy and
`vllm bench serve` compute it), min, max and n. Headline statistics get a 95% bootstrap interval
over requests (steps resampled with their request, never alone).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from specscope.analysis.headline.measure import concurrency_of, main_requests
from specscope.analysis.steps.reconstruct import reconstruct_steps
from specscope.analysis.steps.server import server_commit
from specscope.trace import tags
from specscope.trace.model import RequestTrace, Run, Step

PERCENTILES: tuple[int, ...] = (1, 5, 25, 50, 75, 90, 95, 99)
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0

#: SLO names accepted by `--slo`, and the per-request value each one bounds.
SLO_METRICS: dict[str, str] = {
    "ttft": "time to first token",
    "tpot": "decode time per output token (TTFT excluded)",
    "itl": "the request's largest inter-token latency (a step's gap / its tokens)",
    "step": "the request's largest inter-step latency (one verify step's gap)",
    "e2e": "end-to-end latency",
}
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
_SLO_ITEM = re.compile(
    r"^\s*([a-z0-9_]+)\s*=\s*([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*([a-zµ]*)\s*$", re.IGNORECASE
)


class SloError(ValueError):
    """`--slo` text that cannot be read; the message says what was expected."""


def parse_slo(text: str) -> dict[str, float]:
    """`"ttft=2s,tpot=50ms"` -> {"ttft": 2.0, "tpot": 0.05} (seconds). Units s, ms, us are
    required: a bare number would be read as seconds by some tools and milliseconds by others."""
    out: dict[str, float] = {}
    items = [p for p in text.split(",") if p.strip()]
    if not items:
        raise SloError(
            f"--slo expects NAME=VALUE[,NAME=VALUE...] like ttft=2s,tpot=50ms (got {text!r})"
        )
    for item in items:
        m = _SLO_ITEM.match(item)
        if m is None:
            raise SloError(
                f"--slo: cannot read {item.strip()!r}; expected NAME=NUMBER UNIT like tpot=50ms"
            )
        name, number, unit = m.group(1).lower(), float(m.group(2)), m.group(3).lower()
        if name not in SLO_METRICS:
            raise SloError(f"--slo: unknown metric {name!r}; use {', '.join(SLO_METRICS)}")
        if unit not in _UNITS:
            raise SloError(f"--slo: {item.strip()!r} needs a unit: s, ms or us")
        if name in out:
            raise SloError(f"--slo: {name} given twice")
        if not number > 0:
            raise SloError(f"--slo: {name} must be > 0 (got {item.strip()!r})")
        out[name] = number * _UNITS[unit]
    return out


# --- per request -------------------------------------------------------------------------------


@dataclass
class RequestMetrics:
    """One request's serving numbers (None where it cannot be measured) and its timed steps."""

    trace: RequestTrace
    concurrency: int
    steps: Sequence[Step]
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    output_tokens: int
    chunk_gaps_s: list[float]

    @property
    def ok(self) -> bool:
        return self.trace.ok

    @property
    def output_tps(self) -> float | None:
        return self.output_tokens / self.e2e_s if self.e2e_s and self.output_tokens else None

    @property
    def decode_tps(self) -> float | None:
        return 1.0 / self.tpot_s if self.tpot_s else None

    @property
    def step_latencies_s(self) -> list[float]:
        return [s.step_s for s in self.steps]

    @property
    def token_latencies_s(self) -> list[float]:
        """Each step's gap spread over its tokens, one value per token."""
        return [s.step_s / s.commit_len for s in self.steps for _ in range(s.commit_len)]

    @property
    def max_inter_step_s(self) -> float | None:
        return max(self.step_latencies_s) if self.steps else None

    @property
    def max_inter_token_s(self) -> float | None:
        return max(s.step_s / s.commit_len for s in self.steps) if self.steps else None

    @property
    def mean_commit_len(self) -> float | None:
        return sum(s.commit_len for s in self.steps) / len(self.steps) if self.steps else None

    def slo_value(self, name: str) -> float | None:
        return {
            "ttft": self.ttft_s,
            "tpot": self.tpot_s,
            "e2e": self.e2e_s,
            "itl": self.max_inter_token_s,
            "step": self.max_inter_step_s,
        }[name]

    def meets(self, slo: Mapping[str, float]) -> bool:
        """Every SLO met; a failed request or an unmeasurable value does not meet it."""
        if not self.ok:
            return False
        values = [self.slo_value(k) for k in slo]
        return all(v is not None and v <= slo[k] for k, v in zip(slo, values, strict=True))


def tpot_s(trace: RequestTrace) -> float | None:
    """(last token chunk - first token chunk) / (output tokens - 1): TTFT and the end of the
    stream after the last token are excluded, as vLLM's per-request TPOT does. Where the client
    read the first token late, together with the next ones (`RequestTrace.decode_events`), the
    window starts at that read and leaves its later tokens out too: their times are unknown."""
    reads = trace.reads()
    n = trace.completion_tokens if trace.completion_tokens is not None else trace.tokens_received
    if len(reads) < 2 or n is None:
        return None
    tokens = n - 1 - sum(k for _, k in reads[0][1:])
    seconds = (reads[-1][-1][0] - reads[0][0][0]) / 1e9
    return seconds / tokens if seconds > 0 and tokens > 0 else None


def request_metrics(trace: RequestTrace, steps: Sequence[Step], concurrency: int) -> RequestMetrics:
    chunks = trace.token_events()
    gaps = [(b[0] - a[0]) / 1e9 for a, b in itertools.pairwise(chunks)]
    n = trace.completion_tokens if trace.completion_tokens is not None else trace.tokens_received
    timed = [s for s in steps if s.commit_len > 0 and s.step_s > 0 and math.isfinite(s.step_s)]
    return RequestMetrics(
        trace=trace,
        concurrency=concurrency,
        steps=timed,
        ttft_s=trace.ttft_s,
        tpot_s=tpot_s(trace),
        e2e_s=trace.e2e_s,
        output_tokens=int(n or 0),
        chunk_gaps_s=gaps,
    )


def timed_steps(trace: RequestTrace, *, max_commit_len: int | None = None) -> list[Step]:
    """Steps whose latency the client measured and trusts.

    A reliable reconstruction timed by client chunks is used as is. When the server's per-step
    lists won but could not be timed because their count differs from the chunks' (vLLM lists
    only the steps that drafted), the chunks alone are reconstructed again, with every
    coalescing check, and used when reliable and at least as many as the listed steps (fewer
    chunks than listed steps means chunks merge steps). A disagreement with the server's mean
    commit length is never overridden: it is the evidence of coalescing.
    """
    rec = reconstruct_steps(trace, max_commit_len=max_commit_len)
    if rec.reliable and rec.timed_by_client:
        return list(rec.steps)
    listed = trace.server_spec.per_step_accepted if trace.server_spec else None
    if rec.method != "server" or not listed:
        return []
    client = reconstruct_steps(
        trace.model_copy(update={"server_spec": None}), max_commit_len=max_commit_len
    )
    if client.reliable and client.timed_by_client and len(client.steps) >= len(listed):
        return list(client.steps)
    return []


# --- statistics --------------------------------------------------------------------------------


def _round(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), 12)


def distribution(values: Sequence[float]) -> dict[str, Any]:
    """n, mean, std (population), min, p1..p99, max; every statistic None when n is 0."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    keys = ["mean", "std", "min", *(f"p{q}" for q in PERCENTILES), "max"]
    if a.size == 0:
        return {"n": 0, **dict.fromkeys(keys)}
    pct = np.percentile(a, PERCENTILES)
    out: dict[str, Any] = {
        "n": int(a.size),
        "mean": _round(a.mean()),
        "std": _round(a.std()),
        "min": _round(a.min()),
    }
    out.update({f"p{q}": _round(v) for q, v in zip(PERCENTILES, pct, strict=True)})
    out["max"] = _round(a.max())
    return out


def bootstrap_ci(
    samples: Sequence[Sequence[float]], statistic: Callable[..., Any]
) -> list[float] | None:
    """95% percentile-bootstrap interval of `statistic` over paired per-request samples (one
    sequence per argument, aligned by request), seeded so a report is reproducible. None with
    fewer than two requests: one request has no spread to resample."""
    data = tuple(np.asarray(s, dtype=float) for s in samples)
    if not data or data[0].size < 2:
        return None
    if all(np.ptp(d) == 0 for d in data):
        v = float(statistic(*data, axis=-1))
        return [_round(v), _round(v)]  # type: ignore[list-item]
    res = stats.bootstrap(
        data,
        statistic,
        paired=True,
        vectorized=True,
        axis=-1,
        n_resamples=BOOTSTRAP_RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        batch=200,
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return [_round(lo), _round(hi)]  # type: ignore[list-item]


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def _median(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(x, axis=axis)


def _ratio_of_sums(num: np.ndarray, den: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.sum(num, axis=axis) / np.sum(den, axis=axis)


def _per_request(values: Sequence[float | None], *, median: bool = True) -> dict[str, Any]:
    """A per-request distribution with intervals on its mean (and median)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    d = distribution(vals)
    d["mean_ci"] = bootstrap_ci([vals], _mean)
    if median:
        d["p50_ci"] = bootstrap_ci([vals], _median)
    return d


def _pooled(per_request: Sequence[tuple[float, float]], values: Sequence[float]) -> dict[str, Any]:
    """A distribution pooled over steps or tokens; its mean's interval resamples requests
    (sum of latencies / count of samples, per request), since steps of one request are not
    independent."""
    d = distribution(values)
    rows = [r for r in per_request if r[1] > 0]
    d["mean_ci"] = bootstrap_ci([[r[0] for r in rows], [r[1] for r in rows]], _ratio_of_sums)
    return d


# --- groups ------------------------------------------------------------------------------------


def _span_s(reqs: Sequence[RequestMetrics]) -> float | None:
    sends = [r.trace.t_send_ns for r in reqs]
    ends = [r.trace.t_end_ns for r in reqs if r.trace.t_end_ns is not None]
    if not sends or not ends:
        return None
    span = (max(ends) - min(sends)) / 1e9
    return span if span > 0 else None


def _goodput(
    reqs: Sequence[RequestMetrics], slo: Mapping[str, float], span: float | None
) -> dict[str, Any]:
    met = [1.0 if r.meets(slo) else 0.0 for r in reqs]
    unknown = {k: sum(1 for r in reqs if r.ok and r.slo_value(k) is None) for k in slo}
    good = int(sum(met))
    return {
        "slo_s": dict(slo),
        "requests": len(reqs),
        "good_requests": good,
        "share": _round(good / len(reqs)) if reqs else None,
        "share_ci": bootstrap_ci([met], _mean),
        "good_rps": _round(good / span) if span else None,
        "met_by_metric": {
            k: sum(1 for r in reqs if r.ok and (v := r.slo_value(k)) is not None and v <= slo[k])
            for k in slo
        },
        "unmeasured_by_metric": {k: n for k, n in unknown.items() if n},
    }


def group_metrics(
    reqs: Sequence[RequestMetrics], slo: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """Every serving metric over one group of requests (failed ones count in `requests`,
    `errors` and goodput, and in no latency)."""
    ok = [r for r in reqs if r.ok]
    span = _span_s(reqs)
    tokens = sum(r.output_tokens for r in ok)
    with_steps = [r for r in ok if r.steps]
    step_rows = [(sum(r.step_latencies_s), float(len(r.steps))) for r in with_steps]
    token_rows = [
        (sum(r.step_latencies_s), float(sum(s.commit_len for s in r.steps))) for r in with_steps
    ]
    step_vals = [v for r in with_steps for v in r.step_latencies_s]
    token_vals = [v for r in with_steps for v in r.token_latencies_s]
    n_steps = sum(len(r.steps) for r in with_steps)
    n_commit = sum(s.commit_len for r in with_steps for s in r.steps)
    total_s = sum(step_vals)
    relation = None
    if n_steps and n_commit:
        per_step, per_token, commit = total_s / n_steps, total_s / n_commit, n_commit / n_steps
        relation = {
            "mean_inter_step_latency_s": _round(per_step),
            "mean_inter_token_latency_s": _round(per_token),
            "mean_commit_len": _round(commit),
            "steps": n_steps,
            "tokens": n_commit,
            "identity": "mean_inter_step_latency_s = mean_inter_token_latency_s x mean_commit_len",
        }
    return {
        "requests": len(reqs),
        "ok": len(ok),
        "errors": len(reqs) - len(ok),
        "duration_s": _round(span),
        "output_tokens": tokens,
        "request_throughput_rps": _round(len(ok) / span) if span else None,
        "output_tps": _round(tokens / span) if span else None,
        "ttft_s": _per_request([r.ttft_s for r in ok]),
        "tpot_s": _per_request([r.tpot_s for r in ok]),
        "e2e_s": _per_request([r.e2e_s for r in ok]),
        "output_tps_per_request": _per_request([r.output_tps for r in ok], median=False),
        "decode_tps_per_request": _per_request([r.decode_tps for r in ok], median=False),
        "inter_token_latency_s": _pooled(token_rows, token_vals),
        "inter_step_latency_s": _pooled(step_rows, step_vals),
        "inter_chunk_latency_s": distribution([g for r in ok for g in r.chunk_gaps_s]),
        "per_step_relation": relation,
        "requests_with_timed_steps": len(with_steps),
        "goodput": _goodput(reqs, slo, span) if slo else None,
    }


def serving_metrics(
    traces: Sequence[RequestTrace],
    steps: Mapping[int, Sequence[Step]] | None = None,
    *,
    run_concurrency: int = 1,
    slo: Mapping[str, float] | None = None,
    max_commit_len: int | None = None,
) -> dict[str, Any]:
    """The `serving` object: the main measurement (`run`) and each concurrency level.

    `steps` maps a request index to its timed steps (see `timed_steps`); requests missing from
    it get theirs reconstructed here. Concurrency levels come from concurrency-sweep tags; a run
    without a sweep has one level, `run_concurrency`.
    """
    metrics: dict[int, RequestMetrics] = {}
    for t in traces:
        st = steps.get(t.index) if steps is not None and t.index in steps else None
        if st is None:
            st = timed_steps(t, max_commit_len=max_commit_len) if t.ok else []
        metrics[t.index] = request_metrics(t, st, concurrency_of(t, run_concurrency))
    main, scope = main_requests(traces)
    swept = [t for t in traces if tags.split(t.spec.tag)[0] == tags.CONCURRENCY_SWEEP]
    levels: dict[int, list[RequestMetrics]] = {}
    for t in swept or main:
        levels.setdefault(metrics[t.index].concurrency, []).append(metrics[t.index])
    run = group_metrics([metrics[t.index] for t in main], slo)
    main_ids = [t.index for t in main]
    by_level = [
        {
            "concurrency": c,
            **(run if [r.trace.index for r in rs] == main_ids else group_metrics(rs, slo)),
        }
        for c, rs in sorted(levels.items())
    ]
    return {
        "scope": scope,
        "slo_s": dict(slo) if slo else None,
        "run": run,
        "by_concurrency": by_level,
    }


def run_concurrency(run: Run) -> int:
    c = run.info.args.get("concurrency") if isinstance(run.info.args, dict) else None
    return c if isinstance(c, int) and c >= 1 else 1


def run_slo(run: Run) -> dict[str, float] | None:
    """The SLOs recorded with the run (`--slo`, stored in seconds), so that a re-analysis or
    `specscope report` reproduces its goodput."""
    slo = run.info.args.get("slo") if isinstance(run.info.args, dict) else None
    if not isinstance(slo, dict):
        return None
    clean = {
        k: float(v)
        for k, v in slo.items()
        if k in SLO_METRICS and isinstance(v, int | float) and v > 0
    }
    return clean or None


def serving_of_run(
    run: Run,
    steps: Mapping[int, Sequence[Step]] | None = None,
    *,
    max_commit_len: int | None = None,
) -> dict[str, Any]:
    """`serving_metrics` with the run's own concurrency and SLOs."""
    return serving_metrics(
        run.requests,
        steps,
        run_concurrency=run_concurrency(run),
        slo=run_slo(run),
        max_commit_len=max_commit_len,
    )


# --- rows for exports --------------------------------------------------------------------------

REQUEST_COLUMNS: tuple[str, ...] = (
    "index",
    "request_id",
    "tag",
    "concurrency",
    "concurrency_slot",
    "ok",
    "error_kind",
    "error_message",
    "http_status",
    "prompt_tokens",
    "output_tokens",
    "finish_reason",
    "send_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "output_tps",
    "decode_tps",
    "chunks",
    "timed_steps",
    "mean_commit_len",
    "mean_inter_step_latency_s",
    "max_inter_step_latency_s",
    "max_inter_token_latency_s",
    "server_mean_commit_len",
    "meets_slo",
)
STEP_COLUMNS: tuple[str, ...] = (
    "request_index",
    "step",
    "end_s",
    "commit_len",
    "inter_step_latency_s",
    "inter_token_latency_s",
    "output_pos",
    "context_len",
    "source",
)


def _origin_ns(run: Run) -> int:
    if run.info.started_perf_ns:
        return run.info.started_perf_ns
    return min((r.t_send_ns for r in run.requests), default=0)


def _request_row(
    t: RequestTrace, m: RequestMetrics, origin: int, slo: dict[str, float] | None
) -> dict[str, Any]:
    """One request's row of REQUEST_COLUMNS: its metrics with the identity and error fields a
    spreadsheet needs beside them."""
    e = t.error
    return {
        "index": t.index,
        "request_id": t.request_id,
        "tag": t.spec.tag,
        "concurrency": m.concurrency,
        "concurrency_slot": t.concurrency_slot,
        "ok": t.ok,
        "error_kind": e.kind if e else None,
        "error_message": e.message if e else None,
        "http_status": e.http_status if e else None,
        "prompt_tokens": t.spec.prompt_tokens or t.prompt_tokens_reported,
        "output_tokens": m.output_tokens,
        "finish_reason": t.finish_reason,
        "send_s": _round((t.t_send_ns - origin) / 1e9),
        "ttft_s": _round(m.ttft_s),
        "tpot_s": _round(m.tpot_s),
        "e2e_s": _round(m.e2e_s),
        "output_tps": _round(m.output_tps),
        "decode_tps": _round(m.decode_tps),
        "chunks": sum(1 for c in t.chunks if c.n_tokens > 0),
        "timed_steps": len(m.steps),
        "mean_commit_len": _round(m.mean_commit_len),
        "mean_inter_step_latency_s": _round(sum(m.step_latencies_s) / len(m.steps))
        if m.steps
        else None,
        "max_inter_step_latency_s": _round(m.max_inter_step_s),
        "max_inter_token_latency_s": _round(m.max_inter_token_s),
        "server_mean_commit_len": _round(sc.mean_commit_len if (sc := server_commit(t)) else None),
        "meets_slo": m.meets(slo) if slo else None,
    }


def export_rows(
    run: Run,
    steps: Mapping[int, Sequence[Step]] | None = None,
    *,
    max_commit_len: int | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(one row per request, one row per timed step), columns REQUEST_COLUMNS / STEP_COLUMNS.
    Times are seconds from the run's start on the client clock; unknown values are None."""
    slo = run_slo(run)
    origin = _origin_ns(run)
    conc = run_concurrency(run)
    req_rows: list[dict[str, Any]] = []
    step_rows: list[dict[str, Any]] = []
    for t in run.requests:
        st = steps.get(t.index) if steps is not None and t.index in steps else None
        if st is None:
            st = timed_steps(t, max_commit_len=max_commit_len) if t.ok else []
        m = request_metrics(t, st, concurrency_of(t, conc))
        req_rows.append(_request_row(t, m, origin, slo))
        for i, s in enumerate(m.steps):
            step_rows.append(
                {
                    "request_index": t.index,
                    "step": i,
                    "end_s": _round((s.t_end_ns - origin) / 1e9),
                    "commit_len": s.commit_len,
                    "inter_step_latency_s": _round(s.step_s),
                    "inter_token_latency_s": _round(s.step_s / s.commit_len),
                    "output_pos": s.output_pos,
                    "context_len": s.context_len,
                    "source": s.source,
                }
            )
    return req_rows, step_rows
