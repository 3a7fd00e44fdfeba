"""The twin's scenario and its pure simulation functions.

A scenario (TOML) says how a speculative server behaves: how long a verify step takes (a linear
model in context, verified tokens, batch and output position, times lognormal noise, plus rare
spikes), how many tokens a step commits (a chain of per-depth acceptance probabilities that can
decay with output position and drop once the context outgrows the drafter's window, or a replayed
histogram), how long prefill takes, how the server streams, and which faults it injects.

Everything here is pure: the functions take a scenario, numbers and a numpy Generator and return
numbers. The live twin backend (`twin/backend.py`) and the virtual-time accuracy suite
(`simulate_request`) share them, so a diagnosis can be checked against the exact truth.
All times returned are already multiplied by `time_scale` (they are what a client would see).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SCENARIO_DIR = Path(str(resources.files("specscope.twin") / "scenarios"))


class ScenarioError(ValueError):
    """A scenario that cannot be loaded; the message names the file and the key."""


class _Table(BaseModel):
    # extra="forbid": a misspelt key is an error naming that key, not a silently ignored setting.
    model_config = ConfigDict(extra="forbid")


class StepTimeModel(_Table):
    """Verify-step time, seconds: s0 + per_context_token*context + per_verified_token*verified
    + per_batch_request*(batch-1) + per_batch_verified_token*batch*verified
    + per_context_verified_token*verified*context + drift_per_output_token*output_pos, times
    lognormal noise. In a batch, `context` is the sum of its requests' contexts (attention reads
    every request's own KV cache) and `output_pos` the largest.

    `per_batch_verified_token` is continuous batching's verify cost: one forward pass over every
    request's verified tokens, so it grows with batch x verified tokens per request (the term
    that makes speculation lose at high concurrency once the step is compute-bound).
    `per_context_verified_token` is attention's share of it: each verified token attends to the
    whole context, so a wide verify grows with context faster than plain decoding does (the term
    that makes speculation lose at long context)."""

    s0: float = Field(0.02, ge=0)
    per_context_token: float = Field(0.0, ge=0)
    per_verified_token: float = Field(0.0, ge=0)
    per_batch_request: float = Field(0.0, ge=0)
    per_batch_verified_token: float = Field(0.0, ge=0)
    per_context_verified_token: float = Field(0.0, ge=0)
    drift_per_output_token: float = 0.0
    noise_sigma: float = Field(0.0, ge=0, le=2)
    # lag-1 correlation of the noise between consecutive steps of a request (jitter that
    # persists for a while: other tenants, clocks, thermal); 0 = independent steps
    noise_rho: float = Field(0.0, ge=0, lt=1)
    spike_prob: float = Field(0.0, ge=0, le=1)
    spike_s: float = Field(0.0, ge=0)


class PrefillTable(_Table):
    s0: float = Field(0.01, ge=0)
    per_prompt_token: float = Field(0.0, ge=0)


class AcceptanceTable(_Table):
    """Chain acceptance: draft at depth d is accepted with probability depth_probs[d-1] given
    depths 1..d-1 were accepted. An empty list means no speculation (every step commits 1)."""

    depth_probs: list[float] = Field(default_factory=list)
    decay_per_output_token: float = Field(0.0, ge=0)
    decay_floor: float = Field(0.0, ge=0, le=1)
    window: int = Field(0, ge=0)
    window_penalty: float = Field(1.0, ge=0, le=1)
    # Shared drafter capacity: every depth's acceptance is scaled by
    # max(batch_floor, exp(-decay_per_batch_request*(batch-1))) in a batch of `batch` requests.
    decay_per_batch_request: float = Field(0.0, ge=0)
    batch_floor: float = Field(0.0, ge=0, le=1)
    # Replay: index k = weight of steps that accepted exactly k drafts (SGLang histogram order).
    replay_histogram: list[float] = Field(default_factory=list)
    # Tokens the target verifies per step (tree budget + 1); 0 = num_draft_tokens.
    verify_width: int = Field(0, ge=0)
    algorithm: str = "DDTREE"
    # Content-dependent acceptance (realistic noise): every depth's acceptance is shifted on the
    # logit scale by a per-request draw N(0, request_sigma) (some prompts are easier to draft)
    # plus a stretch term along the generation, N(0, stretch_sigma) with correlation
    # exp(-1/stretch_steps) between consecutive steps (easy and hard passages). 0 = off.
    request_sigma: float = Field(0.0, ge=0, le=3)
    stretch_sigma: float = Field(0.0, ge=0, le=3)
    stretch_steps: float = Field(20.0, gt=0)

    @model_validator(mode="after")
    def _check(self) -> AcceptanceTable:
        if any(not 0.0 <= p <= 1.0 for p in self.depth_probs):
            raise ValueError("depth_probs: every probability must be within [0, 1]")
        hist = self.replay_histogram
        if hist and (any(w < 0 for w in hist) or sum(hist) <= 0):
            raise ValueError("replay_histogram: weights must be >= 0 with a positive sum")
        return self

    @property
    def max_drafts(self) -> int:
        if self.replay_histogram:
            return len(self.replay_histogram) - 1
        return len(self.depth_probs)

    @property
    def num_draft_tokens(self) -> int:
        """SGLang's speculative_num_draft_tokens (drafts + the current token); 0 = no speculation."""
        return self.max_drafts + 1 if self.max_drafts > 0 else 0

    @property
    def verified_tokens(self) -> int:
        return self.verify_width or max(1, self.num_draft_tokens)


class StreamingTable(_Table):
    stream_interval: int = Field(1, ge=1)
    per_token_events: bool = False


class FaultsTable(_Table):
    disconnect_prob: float = Field(0.0, ge=0, le=1)
    error_5xx_prob: float = Field(0.0, ge=0, le=1)
    error_status: int = Field(503, ge=500, le=599)
    stall_prob: float = Field(0.0, ge=0, le=1)
    stall_s: float = Field(0.0, ge=0)


class Scenario(_Table):
    name: str = "unnamed"
    description: str = ""
    model: str = "specscope-twin"
    max_context: int = Field(32768, ge=16)
    max_batch: int = Field(256, ge=1)
    seed: int = 0
    time_scale: float = Field(1.0, gt=0)
    step: StepTimeModel = Field(default_factory=StepTimeModel)
    prefill: PrefillTable = Field(default_factory=PrefillTable)
    acceptance: AcceptanceTable = Field(default_factory=AcceptanceTable)
    streaming: StreamingTable = Field(default_factory=StreamingTable)
    faults: FaultsTable = Field(default_factory=FaultsTable)
    # Overrides (same tables as above) for a variant, e.g. the no-speculation baseline.
    baseline: dict[str, Any] = Field(default_factory=dict)

    def variant(self, name: str) -> Scenario:
        """The scenario with a variant table merged in (only "baseline" exists)."""
        if name != "baseline":
            raise ScenarioError(f"scenario {self.name}: unknown variant {name!r} (known: baseline)")
        if not self.baseline:
            raise ScenarioError(f"scenario {self.name}: has no [baseline] table")
        data = _deep_merge(self.model_dump(exclude={"baseline"}), self.baseline)
        data["name"] = f"{self.name}:baseline"
        return _validate(data, f"{self.name} [baseline]")

    def scaled(self, time_scale: float) -> Scenario:
        """A copy with another time scale (all simulated times multiplied by it)."""
        return self.model_copy(update={"time_scale": time_scale})


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _validate(data: dict[str, Any], origin: str) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ScenarioError(f"{origin}: key {key}: {first['msg']}") from None


def scenario_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


def resolve_scenario_path(name_or_path: str | Path) -> Path:
    """A path to an existing file, or the name of a shipped scenario (with or without .toml)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = SCENARIO_DIR / (path.name if path.suffix == ".toml" else f"{path.name}.toml")
    bare_name = str(name_or_path) in (path.name, path.stem)
    if bare_name and shipped.is_file():
        return shipped
    raise ScenarioError(
        f"{name_or_path}: no such scenario file (shipped scenarios: {', '.join(scenario_names())})"
    )


def load_scenario(name_or_path: str | Path, variant: str | None = None) -> Scenario:
    """Load and validate a scenario; `NAME:baseline` or variant="baseline" picks the variant."""
    text = str(name_or_path)
    if variant is None and ":" in text and not Path(text).exists():
        text, variant = text.rsplit(":", 1)
    path = resolve_scenario_path(text)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not a text file (a scenario is a TOML file)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from None
    data.setdefault("name", path.stem)
    scenario = _validate(data, str(path))
    return scenario.variant(variant) if variant else scenario


# ---------------------------------------------------------------------------------------------
# Pure simulation functions


def expected_step_s(
    sc: Scenario, context_len: float, verified_tokens: int, batch_size: float, output_pos: int
) -> float:
    """The noiseless step time (already time-scaled): the step-time model's mean. `context_len`
    is the step's attention context: one request's, or the sum over a batch's requests."""
    st = sc.step
    s = (
        st.s0
        + st.per_context_token * context_len
        + st.per_context_verified_token * verified_tokens * context_len
        + st.per_verified_token * verified_tokens
        + st.per_batch_request * max(0, batch_size - 1)
        + st.per_batch_verified_token * max(1, batch_size) * verified_tokens
        + st.drift_per_output_token * output_pos
    )
    return max(0.0, s) * sc.time_scale


def step_time(
    sc: Scenario,
    context_len: int,
    verified_tokens: int,
    batch_size: int,
    output_pos: int,
    rng: np.random.Generator,
    z: float | None = None,
) -> float:
    """One step's simulated duration. Noise is mean-preserving lognormal (exp(sigma*z -
    sigma^2/2)), so `expected_step_s` stays the true mean; a spike adds `spike_s`. `z` is the
    step's standard normal when the caller correlates it (RequestNoise), else drawn here."""
    s = expected_step_s(sc, context_len, verified_tokens, batch_size, output_pos)
    sigma = sc.step.noise_sigma
    if sigma > 0:
        zz = float(rng.standard_normal()) if z is None else z
        s *= math.exp(sigma * zz - sigma * sigma / 2)
    if sc.step.spike_prob > 0 and float(rng.random()) < sc.step.spike_prob:
        s += sc.step.spike_s * sc.time_scale
    return s


def acceptance_multiplier(
    sc: Scenario, output_pos: int, context_len: int, batch_size: float = 1
) -> float:
    """How much every depth's acceptance is scaled at this point of a generation: the easy-early
    decay exp(-decay*pos) (never below decay_floor) times the window penalty once the context
    exceeds the drafter's window, times the shared-drafter penalty of a batch."""
    acc = sc.acceptance
    m = 1.0
    if acc.decay_per_output_token > 0:
        m = max(acc.decay_floor, math.exp(-acc.decay_per_output_token * output_pos))
    if acc.window > 0 and context_len > acc.window:
        m *= acc.window_penalty
    if acc.decay_per_batch_request > 0 and batch_size > 1:
        m *= max(acc.batch_floor, math.exp(-acc.decay_per_batch_request * (batch_size - 1)))
    return m


def _shifted(p: float, shift: float) -> float:
    """p moved by `shift` on the logit scale."""
    if shift == 0.0 or p <= 0.0 or p >= 1.0:
        return p
    return 1.0 / (1.0 + math.exp(-(math.log(p / (1.0 - p)) + shift)))


def accepted_drafts(
    sc: Scenario,
    output_pos: int,
    context_len: int,
    rng: np.random.Generator,
    shift: float = 0.0,
    batch_size: int = 1,
) -> int:
    """Drafts accepted in one verify step (commit length = this + 1); `shift` is the content's
    logit shift of every depth's acceptance (RequestNoise), 0 for the scenario's mean."""
    acc = sc.acceptance
    mult = acceptance_multiplier(sc, output_pos, context_len, batch_size)
    if acc.replay_histogram:
        weights = np.asarray(acc.replay_histogram, dtype=float)
        k = int(rng.choice(len(weights), p=weights / weights.sum()))
        # The multiplier thins a replayed step: each accepted draft survives with prob `mult`.
        if mult < 1.0:
            kept = 0
            while kept < k and float(rng.random()) < mult:
                kept += 1
            k = kept
        return k
    k = 0
    for p in acc.depth_probs:
        if float(rng.random()) >= _shifted(p, shift) * mult:
            break
        k += 1
    return k


def commit_length(sc: Scenario, output_pos: int, context_len: int, rng: np.random.Generator) -> int:
    return accepted_drafts(sc, output_pos, context_len, rng) + 1


def expected_commit_length(
    sc: Scenario, output_pos: int, context_len: int, batch_size: float = 1
) -> float:
    """Mean commit length at this point (exact for chains; replay ignores thinning order)."""
    acc = sc.acceptance
    mult = acceptance_multiplier(sc, output_pos, context_len, batch_size)
    if acc.replay_histogram:
        w = np.asarray(acc.replay_histogram, dtype=float)
        w = w / w.sum()
        return 1.0 + float(sum(w[k] * sum(mult**j for j in range(1, k + 1)) for k in range(len(w))))
    total, prob = 1.0, 1.0
    for p in acc.depth_probs:
        prob *= p * mult
        total += prob
    return total


def prefill_time(sc: Scenario, prompt_tokens: int) -> float:
    return (sc.prefill.s0 + sc.prefill.per_prompt_token * prompt_tokens) * sc.time_scale


@dataclass(frozen=True)
class SimStep:
    """One simulated verify step of a request at concurrency 1."""

    commit_len: int
    step_s: float
    accepted_drafts: int
    context_len: int
    output_pos: int


def request_rngs(
    sc: Scenario, request_seed: int
) -> tuple[np.random.Generator, np.random.Generator]:
    """(acceptance rng, timing rng) for one request: independent streams from one seed, so the
    live twin at concurrency 1 and `simulate_request` draw the same numbers."""
    acc_seq, time_seq = np.random.SeedSequence([sc.seed, request_seed]).spawn(2)
    return np.random.default_rng(acc_seq), np.random.default_rng(time_seq)


class RequestNoise:
    """The realistic-noise state of one request: its content's acceptance shift (a per-request
    level plus a correlated stretch term), its correlated step-noise draw and, in virtual time,
    its stall. Its own random stream (drawn only when an option is on), so scenarios without
    these options draw exactly what they drew before."""

    def __init__(self, sc: Scenario, request_seed: int) -> None:
        self._sc = sc
        acc, faults = sc.acceptance, sc.faults
        self._rng = np.random.default_rng(np.random.SeedSequence([sc.seed, request_seed, 4]))
        self.level = (
            float(self._rng.standard_normal()) * acc.request_sigma
            if (acc.request_sigma > 0)
            else 0.0
        )
        self._stretch = 0.0
        if acc.stretch_sigma > 0:
            self._stretch = float(self._rng.standard_normal()) * acc.stretch_sigma
        self._z: float | None = None
        self.stall_at: int | None = None
        if faults.stall_prob > 0 and float(self._rng.random()) < faults.stall_prob:
            self.stall_at = -1  # placed by `place_stall` once the length is known

    def place_stall(self, max_tokens: int) -> None:
        if self.stall_at == -1:
            self.stall_at = int(self._rng.integers(0, max(1, max_tokens - 1)))

    def shift(self) -> float:
        """This step's logit shift of acceptance (advances the stretch term)."""
        acc = self._sc.acceptance
        if acc.stretch_sigma > 0:
            a = math.exp(-1.0 / acc.stretch_steps)
            e = float(self._rng.standard_normal())
            self._stretch = a * self._stretch + math.sqrt(1 - a * a) * acc.stretch_sigma * e
        return self.level + self._stretch

    def step_z(self, time_rng: np.random.Generator) -> float | None:
        """This step's noise draw, AR(1)-correlated with the previous one (None: independent,
        step_time draws it)."""
        rho = self._sc.step.noise_rho
        if rho <= 0 or self._sc.step.noise_sigma <= 0:
            return None
        e = float(time_rng.standard_normal())
        self._z = e if self._z is None else rho * self._z + math.sqrt(1 - rho * rho) * e
        return self._z


def simulate_request_steps(
    sc: Scenario, prompt_tokens: int, max_tokens: int, seed: int = 0
) -> Iterator[SimStep]:
    """Every verify step of one request run alone (batch 1), in order. The last step is cut to
    the tokens left (its accepted_drafts keeps what the drafter really got)."""
    acc_rng, time_rng = request_rngs(sc, seed)
    noise = RequestNoise(sc, seed)
    noise.place_stall(max_tokens)
    verified = sc.acceptance.verified_tokens
    out = 0
    while out < max_tokens:
        context = prompt_tokens + out
        k = accepted_drafts(sc, out, context, acc_rng, noise.shift())
        commit = min(k + 1, max_tokens - out)
        s = step_time(sc, context, verified, 1, out, time_rng, noise.step_z(time_rng))
        if noise.stall_at is not None and out >= noise.stall_at:
            s += sc.faults.stall_s * sc.time_scale
            noise.stall_at = None
        yield SimStep(commit, s, k, context, out)
        out += commit


def simulate_request(
    sc: Scenario, prompt_tokens: int, max_tokens: int, seed: int = 0
) -> Iterator[tuple[int, float]]:
    """(commit_len, step_s) per verify step of one request at concurrency 1 (virtual time)."""
    for st in simulate_request_steps(sc, prompt_tokens, max_tokens, seed):
        yield st.commit_len, st.step_s


def simulate_batch_steps(
    sc: Scenario, prompt_tokens: int, max_tokens: int, seeds: list[int]
) -> list[list[SimStep]]:
    """Every verify step of len(seeds) identical requests admitted together and stepped as one
    continuous batch (virtual time), per request. One step serves every running request: its
    time is drawn once (from the oldest running request's timing stream, as the live twin does)
    at the batch's size and the sum of its requests' contexts (each request's attention reads its
    own KV cache); each request's acceptance is drawn at that batch size. Finished requests leave the batch, so the tail runs at a smaller batch."""
    streams = [request_rngs(sc, s) for s in seeds]
    verified = sc.acceptance.verified_tokens
    out = [0] * len(seeds)
    steps: list[list[SimStep]] = [[] for _ in seeds]
    while True:
        active = [i for i in range(len(seeds)) if out[i] < max_tokens]
        if not active:
            return steps
        batch = len(active)
        context = sum(prompt_tokens + out[i] for i in active)
        s = step_time(
            sc, context, verified, batch, max(out[i] for i in active), streams[active[0]][1]
        )
        for i in active:
            ctx = prompt_tokens + out[i]
            k = accepted_drafts(sc, out[i], ctx, streams[i][0], batch_size=batch)
            commit = min(k + 1, max_tokens - out[i])
            steps[i].append(SimStep(commit, s, k, ctx, out[i]))
            out[i] += commit


def per_request_rate(sc: Scenario, batch_size: float, context_len: float) -> float:
    """The true per-request decode rate (tokens/s) of a steady batch of `batch_size` requests,
    each at `context_len` (continuous in the batch size, as the model is): expected commit length
    over expected step time, at the start of generation (no output-position effects). The step
    attends over every request's context: batch_size x context_len."""
    b = max(1.0, float(batch_size))
    k = expected_commit_length(sc, 0, int(context_len), b)
    s = expected_step_s(sc, b * context_len, sc.acceptance.verified_tokens, b, 0)
    return k / s if s > 0 else float("inf")


def _first_fall(grid: np.ndarray, gap: list[float]) -> float | None:
    """Where gap first falls from > 0 to <= 0 (linear between the bracketing grid points); None
    when it starts <= 0 or never falls."""
    if gap[0] <= 0:
        return None
    for i in range(1, grid.size):
        if gap[i] <= 0:
            return float(grid[i - 1] + (grid[i] - grid[i - 1]) * gap[i - 1] / (gap[i - 1] - gap[i]))
    return None


def breakeven_batch(
    sc: Scenario, baseline: Scenario, context_len: float, high: float
) -> float | None:
    """The true crossover: the batch size in [1, high] at which `sc`'s per-request rate falls to
    `baseline`'s (on a 1/100-request grid, then linear between the two grid points that bracket
    it); None when `sc` is slower from the start or stays faster over the whole range."""
    grid = np.linspace(1.0, high, int((high - 1) * 100) + 1)
    return _first_fall(
        grid,
        [
            per_request_rate(sc, b, context_len) - per_request_rate(baseline, b, context_len)
            for b in grid
        ],
    )


def breakeven_context(sc: Scenario, baseline: Scenario, low: float, high: float) -> float | None:
    """The true context crossover of a lone request (batch 1, as a context sweep runs): the
    context in [low, high] at which `sc`'s rate falls to `baseline`'s (a 1-token grid, then
    linear); None when `sc` is slower from the start or stays faster over the whole range."""
    grid = np.arange(float(low), float(high) + 1.0)
    return _first_fall(
        grid, [per_request_rate(sc, 1.0, c) - per_request_rate(baseline, 1.0, c) for c in grid]
    )
