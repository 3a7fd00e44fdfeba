"""Pydantic models for requests, streamed chunks, reconstructed steps and runs.

Times are integers of nanoseconds from `time.perf_counter_ns()` on the client: monotonic and
comparable within one process, never wall-clock. Each run records one wall-clock anchor
(`RunInfo.started_unix` with `RunInfo.started_perf_ns`) so that server logs, which carry
wall-clock timestamps, can be aligned to requests.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Api = Literal["completions", "chat", "native"]
TokenCountSource = Literal["usage", "meta_info", "logprobs", "events", "tokenizer", "unknown"]
StepSource = Literal["chunk", "burst", "server"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=False)


class RequestSpec(_Model):
    """What one request asks for. `prompt` is text or token ids; `prompt_tokens` is its length
    in the server's tokenizer when known (probe makes prompts of an exact length)."""

    prompt: str | list[int] | list[dict[str, Any]] = ""
    prompt_tokens: int | None = None
    max_tokens: int = 128
    temperature: float = 0.0
    ignore_eos: bool = True
    api: Api = "completions"
    stream: bool = True
    extra: dict[str, Any] = Field(default_factory=dict)
    # Free-form label set by an experiment (e.g. "two_point:n1", "context_sweep:2048").
    tag: str = ""
    # Workload category of the prompt ("code-completion", "reasoning", ...; None: unknown).
    category: str | None = None


class Chunk(_Model):
    """One streamed event as the client received it. `t_ns` is stamped before any parsing."""

    t_ns: int
    n_tokens: int = 0
    n_chars: int = 0
    server_ts: float | None = None


#: ErrorInfo.kind of a request stopped by the client (Ctrl-C): what it streamed before is kept.
CANCELLED = "cancelled"


class ErrorInfo(_Model):
    """A failed request keeps its class (e.g. `http_status`, `timeout_first_byte`,
    `stream_truncated`, `malformed_sse`, `connection`) and a human-readable message."""

    kind: str
    message: str
    http_status: int | None = None


#: `ServerSpecFields.source` of llama.cpp's per-request timings (probe.specfields).
LLAMACPP_TIMINGS = "llamacpp.timings"
#: Sources whose `verify_ct` is the number of verify steps after the first token, exactly.
EXACT_DECODE_STEP_SOURCES = frozenset({LLAMACPP_TIMINGS})


class ServerSpecFields(_Model):
    """Speculation facts the server reported for this request (None when not reported).

    `accept_length` includes the bonus token (tokens committed per verify step), as SGLang's
    `spec_accept_length` and vLLM's `mean_acceptance_length` do.
    `accept_histogram[k]` = number of verify steps that accepted exactly k drafts.
    `per_step_accepted` = ordered accepted-draft counts per verify step when the server gives them.
    """

    verify_ct: int | None = None
    accept_length: float | None = None
    accept_rate: float | None = None
    accepted_drafts: int | None = None
    proposed_drafts: int | None = None
    accept_histogram: list[int] | None = None
    per_step_accepted: list[int] | None = None
    per_step_drafted: list[int] | None = None
    source: str = ""  # e.g. "sglang.meta_info", "vllm.metrics", "llamacpp.timings"
    raw: dict[str, Any] = Field(default_factory=dict)

    @property
    def decode_steps(self) -> int | None:
        """Verify steps after the first token, where the source counts exactly those: llama.cpp's
        timings (predicted_n - 1 - accepted drafts). Other servers' verify counts differ in
        whether the prefill token's pass counts, so they are not taken as this count."""
        return self.verify_ct if self.source in EXACT_DECODE_STEP_SOURCES else None


class RequestTrace(_Model):
    """Everything measured about one request. A failed request is recorded, never dropped."""

    schema_: int = Field(default=SCHEMA_VERSION, alias="schema")
    index: int = 0
    request_id: str | None = None
    spec: RequestSpec
    t_send_ns: int
    chunks: list[Chunk] = Field(default_factory=list)
    token_count_source: TokenCountSource = "unknown"
    completion_tokens: int | None = None
    prompt_tokens_reported: int | None = None
    finish_reason: str | None = None
    text: str | None = None
    server_spec: ServerSpecFields | None = None
    error: ErrorInfo | None = None
    t_end_ns: int | None = None
    concurrency_slot: int = 0
    #: Prompt tokens the server served from its prefix cache, where it says so
    #: (`usage.prompt_tokens_details.cached_tokens`, `usage.cached_tokens`, SGLang
    #: `meta_info.cached_tokens`, llama.cpp `tokens_cached`); None when it did not.
    cached_tokens: int | None = None
    #: Generated tokens by the delta field that carried them (`content`, `reasoning_content`,
    #: `reasoning`, `tool_calls`; `text` for completions): where the server routed the text.
    delta_fields: dict[str, int] | None = None

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft_s(self) -> float | None:
        """Time from send to the first chunk that carried at least one token."""
        for c in self.chunks:
            if c.n_tokens > 0:
                return (c.t_ns - self.t_send_ns) / 1e9
        return None

    @property
    def e2e_s(self) -> float | None:
        if self.t_end_ns is None:
            return None
        return (self.t_end_ns - self.t_send_ns) / 1e9

    @property
    def tokens_received(self) -> int:
        return sum(c.n_tokens for c in self.chunks)

    def token_events(self) -> list[tuple[int, int]]:
        """(t_ns, n_tokens) of every chunk that carried tokens, in arrival order."""
        return [(c.t_ns, c.n_tokens) for c in self.chunks if c.n_tokens > 0]

    def reads(self) -> list[list[tuple[int, int]]]:
        """The token events grouped by the socket read that delivered them: the client stamps
        every event of one read with that read's time, so the same stamp is the same read."""
        reads: list[list[tuple[int, int]]] = []
        for ev in self.token_events():
            if reads and reads[-1][0][0] == ev[0]:
                reads[-1].append(ev)
            else:
                reads.append([ev])
        return reads

    def decode_events(self) -> list[tuple[int, int]]:
        """The token events of the decode window: from the first read's last event on.

        The window starts at the first READ that carried tokens, not at its first event: a
        client late for the first token finds the next ones in the same read, and counting them
        as decoded after it would make decode faster than it was (a loaded machine against
        vLLM: 3 one-token events in the first read, decode tps +2.5% over vLLM's own inter-token
        latency). On time, the first read is the first event alone.
        """
        reads = self.reads()
        return [reads[0][-1], *(ev for r in reads[1:] for ev in r)] if reads else []

    def decode_window(self) -> tuple[int, float] | None:
        """(tokens after the first read that carried tokens, seconds from it to the last).

        This is the token-weighted decode window of the probe contract: prefill and the first
        step are excluded so that TTFT does not leak into decode tps (`decode_events`: where
        the window starts).
        """
        reads = self.reads()
        if len(reads) < 2:
            return None
        total = (
            self.completion_tokens if self.completion_tokens is not None else self.tokens_received
        )
        tokens = total - sum(n for _, n in reads[0])
        seconds = (reads[-1][-1][0] - reads[0][0][0]) / 1e9
        if tokens <= 0 or seconds <= 0:
            return None
        return tokens, seconds


class Step(_Model):
    """A reconstructed verify step: `commit_len` tokens committed (accepted drafts + 1)."""

    t_end_ns: int
    commit_len: int
    step_s: float
    context_len: int | None = None
    output_pos: int = 0
    source: StepSource = "chunk"
    request_index: int = 0


class RunInfo(_Model):
    """`run.json`: what was measured, against what, with which arguments, and how it ended."""

    schema_: int = Field(default=SCHEMA_VERSION, alias="schema")
    tool_version: str = ""
    run_id: str = ""
    kind: str = "probe"  # probe | diagnose | experiment name
    endpoint: str = ""
    flavor: str = ""
    api: str = ""
    model: str | None = None
    server_info: dict[str, Any] = Field(default_factory=dict)
    args: dict[str, Any] = Field(default_factory=dict)
    started_unix: float = 0.0
    started_perf_ns: int = 0
    ended_unix: float | None = None
    status: Literal["running", "complete", "partial", "failed"] = "running"
    status_reason: str = ""
    notes: list[str] = Field(default_factory=list)
    # How far the server evidence reaches: log_coverage (share of the run window that interval
    # log records cover, null when the log has none), log_wait_s, log_records.
    telemetry: dict[str, Any] = Field(default_factory=dict)
    # The adaptive repeats (diagnose --precision): target, budget, what they spent, why they
    # stopped (experiments.precision_loop.PrecisionOutcome); empty when the run had none.
    precision: dict[str, Any] = Field(default_factory=dict)

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    def perf_ns_to_unix(self, t_ns: int) -> float:
        """Wall-clock time of a client perf-counter stamp (for aligning server logs)."""
        return self.started_unix + (t_ns - self.started_perf_ns) / 1e9


class Run(_Model):
    """A run in memory: its info, every request trace, and telemetry records (as dicts, typed
    by `specscope.telemetry`)."""

    info: RunInfo
    requests: list[RequestTrace] = Field(default_factory=list)
    telemetry: list[dict[str, Any]] = Field(default_factory=list)
    # the client's loop-lag samples, one object per worker (client.jsonl; probe.health)
    client: list[dict[str, Any]] = Field(default_factory=list)
    analysis: dict[str, Any] | None = None
    malformed_lines: int = 0

    def by_tag(self, prefix: str) -> list[RequestTrace]:
        return [r for r in self.requests if r.spec.tag.startswith(prefix)]

    @property
    def errors(self) -> list[RequestTrace]:
        return [r for r in self.requests if r.error is not None]
