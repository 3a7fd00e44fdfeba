"""What an analysis produces: headline numbers, attribution, ranked findings, plot series.

This is the contract between `analysis` (which fills it, purely) and `report`/`cli` (which
render it). `Analysis.model_dump(mode="json")` is what `analysis.json` holds.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

FindingId = Literal[
    "acceptance_low",
    "acceptance_decay",
    "draft_window",
    "context_scaling",
    "step_time_drift",
    "two_point_bias",
    "prefill_bound",
    "chunk_coalescing",
    "speculation_overhead",
    "batching_interference",
    "draft_coverage",
    "client_limited",
]

FINDING_IDS: tuple[str, ...] = FindingId.__args__  # type: ignore[attr-defined]


class Evidence(BaseModel):
    """One number behind a finding, and where it came from (e.g. "client chunks, full_generation",
    "server log DDTREE metrics (TP0)", "Prometheus delta llamacpp:spec_decode_*")."""

    label: str
    value: float | int | str | None
    unit: str = ""
    source: str = ""


class RuledOut(BaseModel):
    """A cause the diagnosis considered for a finding and excluded, with the evidence why."""

    id: str  # a cause id (analysis.diagnosis.cards.Cause)
    reason: str


class Finding(BaseModel):
    """One reported effect and the mechanism behind it: `cause` is an id from the closed list
    of causes (ARCHITECTURE §6) when the data decide it, else None with the `candidates` still
    possible; `ruled_out` says which causes were excluded and why."""

    id: FindingId
    summary: str
    evidence: list[Evidence] = Field(default_factory=list)
    confidence: float = 0.0  # 0..1
    factor: float | None = None  # share of the baseline gap it explains (a multiplicative factor)
    next: str = ""  # the experiment or change that would confirm or fix it
    cause: str | None = None
    candidates: list[str] = Field(default_factory=list)
    ruled_out: list[RuledOut] = Field(default_factory=list)


class FindingTest(BaseModel):
    """The statistical test that decided one finding id in this run, reported or not: the
    effect in the claim's direction with its 95% interval, one-sided p, Benjamini-Hochberg q
    over the ids tested, the smallest effect that matters, and the outcome in words."""

    id: FindingId
    method: str
    effect: float | None
    ci: list[float | None]  # [low, high], 95%
    p: float
    q: float | None
    min_effect: float
    unit: str = ""
    reported: bool
    outcome: str  # reported | interval includes zero effect | not significant | below minimum | not testable


class Interval(BaseModel):
    value: float | None
    low: float | None = None
    high: float | None = None


class Attribution(BaseModel):
    """tps_B / tps_O = acceptance_factor * step_time_factor (exactly)."""

    tps_ratio: float | None = None
    acceptance_factor: float | None = None
    step_time_factor: float | None = None
    tps_ratio_ci: Interval | None = None
    acceptance_factor_ci: Interval | None = None
    step_time_factor_ci: Interval | None = None
    baseline_run: str | None = None


# The headline's labels and intervals beside its numbers (`Analysis` fields, copied from
# `Headline.json_fields()` by the diagnosis; diagnose's top-level JSON, ARCHITECTURE §8), in the
# contract's order.
HEADLINE_DETAIL_KEYS = (
    "mean_commit_len_source",
    "mean_commit_len_per_drafted_step",
    "drafted_step_share",
    "mean_step_s_source",
    "decode_tps_ci",
    "mean_commit_len_ci",
    "mean_step_s_ci",
    "ttft_s_ci",
    "interval_method",
    "headline_loops",
    "first_read_share",
    "server_step_s",
    "delivery_lag_share",
)


class Analysis(BaseModel):
    """Headline numbers are from the main measurement (the full generation in a diagnosis).

    `series` holds plot-ready data, keyed by name (all optional):
      commit_len_histogram:      {"commit_len": [..], "count": [..], "source": str}
      commit_len_by_position:    {"output_pos": [..], "mean_commit_len": [..]}
      step_time_by_position:     {"output_pos": [..], "step_s": [..], "expected_step_s": [..]}
      tps_by_context:            {"context": [..], "decode_tps": [..], "step_s": [..], "commit_len": [..]}
      tps_by_output_len:         {"max_tokens": [..], "decode_tps": [..]}
      two_point_vs_full:         {"label": [..], "decode_tps": [..]}
      baseline_vs_observed:      {"label": [..], "decode_tps": [..], "mean_commit_len": [..], "mean_step_s": [..]}
      concurrency:               {"concurrency": [..], "decode_tps_per_request": [..], "step_s": [..]}
      breakeven:                 {"concurrency": [..], "observed_tps": [..], "observed_tps_low": [..],
                                  "observed_tps_high": [..], "baseline_tps"...: fitted per-request
                                  curves with 95% bands, "observed_points"/"baseline_points":
                                  measured, "crossover": x | null}

    `breakeven` (with a baseline): where this run's per-request decode rate meets the baseline's
    (analysis.breakeven): concurrency, concurrency_ci, context, context_ci, reason,
    recommendation, factors; None without a baseline.
    """

    schema_: int = Field(default=1, alias="schema")
    # the diagnosis in a few short sentences, read first (analysis.diagnosis.verdict)
    verdict: list[str] = Field(default_factory=list)
    run_dir: str | None = None
    partial: bool = False
    decode_tps: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    mean_commit_len: float | None = None
    mean_step_s: float | None = None
    commit_len_source: str | None = None  # where mean_commit_len came from, in words
    # analysis.headline's labels and 95% intervals ([low, high]); see ARCHITECTURE §4
    mean_commit_len_source: str | None = None  # client | prometheus | server | log
    mean_commit_len_per_drafted_step: float | None = None  # the server's drafted-steps figure
    drafted_step_share: float | None = None  # share of verify steps that drafted anything
    mean_step_s_source: str | None = None  # client | derived
    decode_tps_ci: list[float] | None = None
    mean_commit_len_ci: list[float] | None = None
    mean_step_s_ci: list[float] | None = None
    ttft_s_ci: list[float] | None = None
    interval_method: str | None = None  # how the intervals were obtained
    # requests ending in repetition loops behind the commit length (null: none loop)
    headline_loops: dict[str, Any] | None = None
    # whether the client kept up: its loop lag against the median step (client_health; null
    # for a run without the client's samples)
    client: dict[str, Any] | None = None
    # share of the decode tokens that came in a first read with the first token (their steps
    # unseen: the headline is over the rest of each generation)
    first_read_share: float | None = None
    # the engine's own mean step time over the same requests (vLLM's inter-token latency
    # histogram, engine timestamps) and the stream's lag behind it as a share (null without it)
    server_step_s: float | None = None
    delivery_lag_share: float | None = None
    # diagnose --precision: target, reached (relative half-width of decode_tps_ci), requests,
    # stopped_by, ... (analysis.precision.summary); None when the run had no target
    precision: dict[str, Any] | None = None
    steps_reliable: bool | None = None  # False when chunks coalesce steps
    # whether the server drafts at all (analysis.speculation): "on" | "off" | "unknown", and the
    # evidence that decided it, in one sentence; drafter findings are made only when "on"
    speculation: str | None = None
    speculation_reason: str | None = None
    requests: int = 0
    errors: int = 0
    findings: list[Finding] = Field(default_factory=list)  # ranked, most important first
    no_finding_reason: str | None = None  # stated plainly when findings is empty
    finding_tests: list[FindingTest] = Field(default_factory=list)  # every claim tested, decided
    attribution: Attribution | None = None
    breakeven: dict[str, Any] | None = None
    step_time_model: dict[str, Any] | None = None  # {"s0":..,"per_context_token":..,"r2":..}
    series: dict[str, dict[str, Any]] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    # TTFT, TPOT, per-token and per-step latency, throughput, goodput (analysis.serving)
    serving: dict[str, Any] | None = None

    model_config = {"populate_by_name": True}
