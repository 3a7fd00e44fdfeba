"""The twin Backend: a simulated speculative server with known ground truth.

It draws each step's commit length and duration from the scenario (twin/scenario.py) and REALLY
sleeps that long (asyncio), so a client measuring from outside sees the simulated behaviour.
Sleeps follow a virtual clock: a step starts where the previous one was scheduled to end when the
server loop's own overhead is smaller than the step, so the observed step-to-step interval is the
scheduled one (bench/twin_fidelity.py measures how close).

Every request's truth (per-step commit lengths and times, prefill time, faults) is kept for
GET /twin/truth/{request_id} and appended to a JSONL file when asked.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import zlib
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specscope.backend import (
    BackendError,
    BackendInfo,
    BatchStep,
    SamplingParams,
    StepOutput,
)
from specscope.twin import text
from specscope.twin.scenario import (
    RequestNoise,
    Scenario,
    accepted_drafts,
    prefill_time,
    request_rngs,
    step_time,
)

TRUTH_KEEP = 4096  # finished requests whose truth stays queryable (oldest dropped first)


@dataclass
class _TwinRequest:
    request_id: str
    seed: int
    prompt_tokens: int
    max_tokens: int
    acc_rng: np.random.Generator
    time_rng: np.random.Generator
    token_rng: np.random.Generator
    disconnect_at: int | None  # output position at which the stream is cut (fault)
    stall_at: int | None  # output position whose step stalls (fault)
    noise: RequestNoise  # content-dependent acceptance, correlated step noise
    output: int = 0
    truth: dict[str, Any] = field(default_factory=dict)
    last_end: float = 0.0  # perf_counter when its prefill or its last step ended

    @property
    def context(self) -> int:
        return self.prompt_tokens + self.output


class TwinBackend:
    """Backend over a Scenario. Not thread-safe: one serve scheduler drives it."""

    def __init__(self, scenario: Scenario, truth_file: Path | None = None):
        self.scenario = scenario
        acc = scenario.acceptance
        ndt = acc.num_draft_tokens
        self.info = BackendInfo(
            model=scenario.model,
            max_context=scenario.max_context,
            spec_algorithm=acc.algorithm if ndt else None,
            num_draft_tokens=ndt,
            page_size=1,
            extra={
                "backend": "twin",
                "scenario": scenario.name,
                # A DFlash server states its drafter window (SGLang's server args).
                **({"draft_window": acc.window} if ndt and acc.window > 0 else {}),
                "time_scale": scenario.time_scale,
                "max_batch": scenario.max_batch,
                "stream_interval": scenario.streaming.stream_interval,
                "per_token_events": scenario.streaming.per_token_events,
            },
        )
        self._verified = acc.verified_tokens
        self._requests: dict[str, _TwinRequest] = {}
        self._truth: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._fault_rng = np.random.default_rng(np.random.SeedSequence([scenario.seed, 0xFA]))
        self._clock_end = 0.0
        self._truth_file = truth_file
        self._truth_lock = threading.Lock()
        # (scheduled_s, actual_s, batch_size, end_unix) of recent batch steps: how closely the
        # twin kept its schedule (bench/twin_fidelity.py) and when it ran slow (a starved host:
        # tests/test_watch_twin.py).
        self.step_log: deque[tuple[float, float, int, float]] = deque(maxlen=100_000)

    # -- tokens ------------------------------------------------------------------------------
    def tokenize(self, text_: str) -> list[int]:
        return text.tokenize(text_)

    def detokenize(self, ids: list[int]) -> str:
        return text.detokenize(ids)

    def apply_chat_template(self, messages: list[dict[str, Any]]) -> list[int]:
        ids: list[int] = []
        for m in messages:
            content = m.get("content") or ""
            if isinstance(content, list):  # OpenAI content parts
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            ids += text.tokenize(f"{m.get('role', 'user')} {content}")
        return ids + text.tokenize("assistant")

    def eos_token_ids(self) -> set[int]:
        return {text.EOS_ID}

    # -- time ----------------------------------------------------------------------------------
    async def _sleep_on_clock(self, duration: float) -> float:
        """Sleep until the scheduled end; returns the actual duration from the scheduled start."""
        now = time.perf_counter()
        lag = now - self._clock_end
        start = self._clock_end if 0 <= lag < duration else now
        end = start + duration
        self._clock_end = end
        delay = end - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        return time.perf_counter() - start

    # -- protocol --------------------------------------------------------------------------------
    async def prefill(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> None:
        sc = self.scenario
        if len(prompt_ids) + params.max_tokens > sc.max_context:
            raise BackendError(
                f"prompt ({len(prompt_ids)} tokens) + max_tokens ({params.max_tokens}) exceeds "
                f"the context ({sc.max_context})"
            )
        faults = sc.faults
        draws = self._fault_rng.random(3)
        if faults.error_5xx_prob > 0 and draws[0] < faults.error_5xx_prob:
            self._remember(request_id, {"request_id": request_id, "fault": "error_5xx"})
            raise BackendError("simulated server error (twin fault)", status=faults.error_status)
        seed = (
            params.seed
            if params.seed is not None
            else zlib.crc32(np.asarray(prompt_ids, dtype=np.int64).tobytes())
        )
        seed %= 2**64  # a negative API seed is valid; SeedSequence takes non-negative entropy
        acc_rng, time_rng = request_rngs(sc, seed)
        token_rng = np.random.default_rng(np.random.SeedSequence([sc.seed, seed, 2]))
        span = max(1, params.max_tokens - 1)
        disconnect_at = stall_at = None
        if faults.disconnect_prob > 0 and draws[1] < faults.disconnect_prob:
            disconnect_at = 1 + int(self._fault_rng.integers(0, span))
        if faults.stall_prob > 0 and draws[2] < faults.stall_prob:
            stall_at = int(self._fault_rng.integers(0, span))
        req = _TwinRequest(
            request_id,
            seed,
            len(prompt_ids),
            params.max_tokens,
            acc_rng,
            time_rng,
            token_rng,
            disconnect_at,
            stall_at,
            RequestNoise(sc, seed),
        )
        pre_s = prefill_time(sc, len(prompt_ids))
        req.truth = {
            "request_id": request_id,
            "scenario": sc.name,
            "seed": seed,
            "time_scale": sc.time_scale,
            "prompt_tokens": len(prompt_ids),
            "max_tokens": params.max_tokens,
            "prefill_s": pre_s,
            "fault": None,
            "steps": [],
        }
        self._requests[request_id] = req
        req.truth["prefill_actual_s"] = await self._sleep_on_clock(pre_s)
        req.last_end = time.perf_counter()

    async def step(self, request_ids: list[str]) -> BatchStep:
        sc = self.scenario
        reqs = [self._requests[i] for i in request_ids if i in self._requests]
        if not reqs:
            return BatchStep(outputs=[], step_s=0.0)
        batch = len(reqs)
        context = sum(r.context for r in reqs)  # attention reads every request's own KV cache
        out_pos = max(r.output for r in reqs)
        # The oldest request's timing stream drives the batch, so batch 1 matches simulate_request.
        lead = reqs[0]
        s = step_time(
            sc,
            context,
            self._verified,
            batch,
            out_pos,
            lead.time_rng,
            lead.noise.step_z(lead.time_rng),
        )
        stall_s = 0.0
        for r in reqs:  # a stalled request stalls the whole batch (one forward pass)
            if r.stall_at is not None and r.output >= r.stall_at:
                stall_s = sc.faults.stall_s * sc.time_scale
                r.stall_at = None
                r.truth["fault"] = "stall"
        outputs, planned = [], []
        for r in reqs:
            k = accepted_drafts(sc, r.output, r.context, r.acc_rng, r.noise.shift(), batch)
            commit = min(k + 1, r.max_tokens - r.output)
            tokens = text.pseudo_text_ids(r.token_rng, commit)
            planned.append((r, k, commit, r.context, r.output))
            r.output += commit
            out = StepOutput(
                request_id=r.request_id,
                tokens=tokens,
                accepted_drafts=k,
                proposed_drafts=sc.acceptance.max_drafts,
                finished=r.output >= r.max_tokens,
                finish_reason="length" if r.output >= r.max_tokens else None,
            )
            if r.disconnect_at is not None and r.output >= r.disconnect_at and not out.finished:
                out.finished, out.finish_reason = True, "abort"
                r.truth["fault"] = "disconnect"
            outputs.append(out)
        actual = await self._sleep_on_clock(s + stall_s)
        t_end_unix = time.time()  # wall clock, to align with the server log's timestamps
        self.step_log.append((s + stall_s, actual, batch, t_end_unix))
        t_end = time.perf_counter()
        for r, k, commit, ctx, pos in planned:
            # wall_s: since the request's previous step (or prefill) ended, what its client can
            # time; the clock keeps the schedule (step_s) unless a loaded machine falls behind
            wall, r.last_end = t_end - r.last_end, t_end
            r.truth["steps"].append(
                {
                    "commit_len": commit,
                    "accepted_drafts": k,
                    "step_s": s + stall_s,
                    "scheduled_s": s,
                    "actual_s": actual,
                    "wall_s": wall,
                    "batch_size": batch,
                    "context_len": ctx,
                    "output_pos": pos,
                    "t_end_unix": t_end_unix,
                }
            )
        for out in outputs:
            if out.finished:
                self._finish(self._requests[out.request_id], out.finish_reason)
        return BatchStep(outputs=outputs, step_s=s + stall_s, timing={"verify": s + stall_s})

    def release(self, request_id: str) -> None:
        req = self._requests.get(request_id)
        if req is not None:
            self._finish(req, "released")

    # -- truth -----------------------------------------------------------------------------------
    def _finish(self, req: _TwinRequest, reason: str | None) -> None:
        self._requests.pop(req.request_id, None)
        steps = req.truth["steps"]
        commits = [s["commit_len"] for s in steps]
        times = [s["step_s"] for s in steps]
        req.truth.update(
            finish_reason=reason,
            completion_tokens=sum(commits),
            verify_steps=len(steps),
            mean_commit_len=sum(commits) / len(commits) if commits else None,
            mean_step_s=sum(times) / len(times) if times else None,
        )
        self._remember(req.request_id, req.truth)

    def _remember(self, request_id: str, truth: dict[str, Any]) -> None:
        self._truth[request_id] = truth
        while len(self._truth) > TRUTH_KEEP:
            self._truth.popitem(last=False)
        if self._truth_file is not None:
            line = json.dumps(truth) + "\n"
            with self._truth_lock, self._truth_file.open("a", encoding="utf-8") as fh:
                fh.write(line)

    def truth(self, request_id: str) -> dict[str, Any] | None:
        """Ground truth of a request (in flight: the steps so far)."""
        if request_id in self._requests:
            return dict(self._requests[request_id].truth, finish_reason=None)
        return self._truth.get(request_id)

    def truth_ids(self) -> list[str]:
        """Request ids with finished truth, oldest first."""
        return list(self._truth)

    @property
    def active_requests(self) -> int:
        """Requests prefilled and not yet finished or released (a leak shows here)."""
        return len(self._requests)

    def describe(self) -> dict[str, Any]:
        return self.scenario.model_dump()
