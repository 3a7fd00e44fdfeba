"""The serving table (TTFT, TPOT, per-token and per-step latency, throughput, goodput) and the
metric glossary, for every renderer. Rows are built once here; terminal, Markdown and HTML only
lay them out. The glossary is the one source of the README's glossary table (a test keeps the
two equal)."""

from __future__ import annotations

from typing import Any, NamedTuple

#: (key in a serving group, label, unit scale, unit)
LATENCY_ROWS: tuple[tuple[str, str, float, str], ...] = (
    ("ttft_s", "TTFT", 1e3, "ms"),
    ("tpot_s", "TPOT", 1e3, "ms"),
    ("inter_token_latency_s", "ITL per token", 1e3, "ms"),
    ("inter_step_latency_s", "latency per step", 1e3, "ms"),
    ("inter_chunk_latency_s", "gap per chunk", 1e3, "ms"),
    ("e2e_s", "end-to-end", 1.0, "s"),
    ("output_tps_per_request", "tok/s per request", 1.0, ""),
)
TABLE_HEADER: tuple[str, ...] = ("metric", "p50", "p90", "p99", "mean [95% CI]", "n")
LEVEL_HEADER: tuple[str, ...] = (
    "concurrency",
    "requests (errors)",
    "req/s",
    "output tok/s",
    "TTFT p50 ms",
    "TPOT p50 ms",
    "per-step p50 ms",
    "goodput",
)


def _num(v: float | None, scale: float = 1.0) -> str:
    if v is None:
        return "-"
    x = v * scale
    if abs(x) < 10:
        return f"{x:.3g}"
    return f"{x:.1f}" if abs(x) < 100 else f"{x:.0f}"


def _ci(ci: list[float] | None, scale: float) -> str:
    return "" if not ci else f" [{_num(ci[0], scale)}, {_num(ci[1], scale)}]"


def _same_as_steps(key: str, group: dict[str, Any]) -> bool:
    """The chunk gaps are the step latencies when every chunk carried one step (a server that
    streams each step): the row would repeat the one above it."""
    if key != "inter_chunk_latency_s":
        return False
    chunk, step = group.get(key) or {}, group.get("inter_step_latency_s") or {}
    return all(chunk.get(k) == step.get(k) for k in ("n", "p50", "p90", "p99", "mean"))


def latency_rows(group: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row per latency metric that has samples: label (unit), p50, p90, p99, mean [CI], n
    (the chunk gaps only where they differ from the steps)."""
    rows = []
    for key, label, scale, unit in LATENCY_ROWS:
        d = group.get(key) or {}
        if not d.get("n") or _same_as_steps(key, group):
            continue
        rows.append(
            (
                f"{label} ({unit})" if unit else label,
                _num(d.get("p50"), scale),
                _num(d.get("p90"), scale),
                _num(d.get("p99"), scale),
                _num(d.get("mean"), scale) + _ci(d.get("mean_ci"), scale),
                str(d["n"]),
            )
        )
    return rows


def _goodput_text(g: dict[str, Any] | None) -> str:
    if not g:
        return "-"
    share = g.get("share")
    ci = g.get("share_ci")
    ci_text = f" [{ci[0] * 100:.0f}, {ci[1] * 100:.0f}]" if ci else ""
    rate = g.get("good_rps")
    return (
        f"{share * 100:.0f}%{ci_text} ({g['good_requests']}/{g['requests']}"
        + (f", {rate:.3g} req/s" if rate is not None else "")
        + ")"
        if share is not None
        else "-"
    )


def summary_lines(serving: dict[str, Any]) -> list[str]:
    """Throughput, the per-step = per-token x commit length identity, and goodput, as sentences."""
    run = serving.get("run") or {}
    lines = [
        f"{serving.get('scope', 'requests')}: {run.get('ok', 0)} ok of {run.get('requests', 0)}"
        f" over {_num(run.get('duration_s'))} s; request throughput "
        f"{_num(run.get('request_throughput_rps'))} req/s, output "
        f"{_num(run.get('output_tps'))} tok/s (aggregate; one wall-clock span, no interval)"
    ]
    rel = run.get("per_step_relation")
    if rel:
        lines.append(
            f"per step = per token x commit length: {_num(rel['mean_inter_step_latency_s'], 1e3)} ms"
            f" = {_num(rel['mean_inter_token_latency_s'], 1e3)} ms x "
            f"{rel['mean_commit_len']:.2f} tokens/step (means over {rel['steps']} timed steps)"
        )
    elif run.get("ok"):
        lines.append(
            "no timed verify steps (chunks merge steps or the server reported no "
            "per-step times): per-step and per-token latency unknown; TPOT still holds"
        )
    g = run.get("goodput")
    if g:
        slo = ", ".join(
            f"{k} <= {_num(v)} s" if v >= 1 else f"{k} <= {_num(v, 1e3)} ms"
            for k, v in g["slo_s"].items()
        )
        lines.append(f"goodput ({slo}): {_goodput_text(g)}")
    return lines


def level_rows(serving: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row per concurrency level (only worth showing when there are several)."""
    rows = []
    for lvl in serving.get("by_concurrency") or []:
        rows.append(
            (
                str(lvl["concurrency"]),
                f"{lvl['requests']} ({lvl['errors']})",
                _num(lvl.get("request_throughput_rps")),
                _num(lvl.get("output_tps")),
                _num((lvl.get("ttft_s") or {}).get("p50"), 1e3),
                _num((lvl.get("tpot_s") or {}).get("p50"), 1e3),
                _num((lvl.get("inter_step_latency_s") or {}).get("p50"), 1e3),
                _goodput_text(lvl.get("goodput")),
            )
        )
    return rows


# --- glossary ----------------------------------------------------------------------------------


class Term(NamedTuple):
    ours: str
    definition: str
    aiperf: str
    guidellm: str
    vllm_bench: str
    vllm_prometheus: str
    llamacpp: str
    evalscope: str


GLOSSARY_HEADER: tuple[str, ...] = (
    "specscope key",
    "definition (client clock)",
    "aiperf",
    "guidellm",
    "`vllm bench serve`",
    "vLLM Prometheus",
    "llama.cpp `timings`",
    "evalscope perf",
)
GLOSSARY: tuple[Term, ...] = (
    Term(
        "`ttft_s`",
        "send → first chunk carrying a token",
        "TTFT (same)",
        "`time_to_first_token_ms` (same)",
        "TTFT (same)",
        "`time_to_first_token_seconds` (engine side: no network, from arrival)",
        "≈ `prompt_ms` (prefill only: no queue, no network)",
        "TTFT / first chunk latency (same)",
    ),
    Term(
        "`tpot_s`",
        "(last token chunk − first token chunk) / (output tokens − 1): decode time "
        "per token, TTFT excluded (a first read late enough to hold later tokens starts the "
        "window, its later tokens left out)",
        "ITL, `inter_token_latency` (same, but to the last response, which may be a usage chunk)",
        "`inter_token_latency_ms` (same); its `time_per_output_token_ms` **includes TTFT** "
        "((last − start) / tokens)",
        "TPOT (same, excl. 1st token)",
        "`request_time_per_output_token_seconds` (same, engine timestamps)",
        "`predicted_per_token_ms` = `predicted_ms` / `predicted_n`: the first token is counted, "
        "so (n−1)/n × ours; `predicted_ms` / (n − 1) is ours",
        "TPOT (same)",
    ),
    Term(
        "`inter_token_latency_s`",
        "each verify step's gap spread over the tokens it "
        "committed: one sample per token; mean = decode time / decode tokens",
        "none (genai-perf's chunked ITL is this)",
        "none (per-request mean only)",
        "none (its ITL is per chunk)",
        "none (SGLang's `inter_token_latency_seconds` is this)",
        "—",
        "none",
    ),
    Term(
        "`inter_step_latency_s`",
        "gap before each verify step: one sample per step = per token × commit length",
        "ICL (inter-chunk) when one chunk is one step",
        "none",
        "ITL (one sample per chunk = per step)",
        "`inter_token_latency_seconds` (one observation per output event = per step)",
        "≈ `predicted_ms` / steps (steps: `n_decode_total` delta − 1)",
        "ITL (mean of per-chunk gaps: per step when one chunk is one step)",
    ),
    Term(
        "`inter_chunk_latency_s`",
        "raw gaps between token-bearing chunks (a chunk may merge or split steps)",
        "ICL, `inter_chunk_latency` (same)",
        "none",
        "ITL (same)",
        "—",
        "our chunks are its per-token events (gaps inside a step ≈ 0)",
        "ITL (same)",
    ),
    Term(
        "`e2e_s`",
        "send → end of the stream",
        "request latency (same)",
        "request latency (same)",
        "E2EL (same)",
        "`e2e_request_latency_seconds` (engine side)",
        "≈ `prompt_ms` + `predicted_ms`",
        "latency (same)",
    ),
    Term(
        "`output_tps_per_request`",
        "output tokens / e2e (TTFT included)",
        "none",
        "`output_tokens_per_second` (same)",
        "none",
        "—",
        "—",
        "none",
    ),
    Term(
        "`decode_tps_per_request`",
        "1 / TPOT",
        "output token throughput per user (same)",
        "none",
        "none",
        "—",
        "`predicted_per_second` = n / `predicted_ms`: n/(n−1) × ours",
        "none",
    ),
    Term(
        "`output_tps`",
        "all output tokens / wall span (first send → last end)",
        "output token throughput (same)",
        "output tokens/s (same)",
        "output token throughput (same)",
        "rate of `generation_tokens_total`",
        "—",
        "output token throughput (same)",
    ),
    Term(
        "`request_throughput_rps`",
        "successful requests / wall span",
        "request throughput (same)",
        "requests/s (same)",
        "request throughput (same)",
        "—",
        "—",
        "request throughput (same)",
    ),
    Term(
        "`goodput`",
        "share (and rate) of all requests, failed ones included, meeting every "
        "`--slo`; `itl`/`step` bound the request's largest per-token / per-step latency",
        "goodput (`--goodput`, its `inter_token_latency` = our `tpot`)",
        "none",
        "`--goodput ttft tpot e2el` (same, as req/s)",
        "—",
        "—",
        "SLA auto-tune (search, not a share)",
    ),
)


def glossary_markdown() -> str:
    """The glossary as a Markdown table (the README carries this text verbatim)."""
    lines = ["| " + " | ".join(GLOSSARY_HEADER) + " |", "|" + "---|" * len(GLOSSARY_HEADER)]
    lines += ["| " + " | ".join(t) + " |" for t in GLOSSARY]
    return "\n".join(lines) + "\n"
