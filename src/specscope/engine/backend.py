"""EngineBackend: the real decoder behind `serve`'s Backend protocol (continuous batching).

Life of a request:
- `prefill` admits it (KV reservation, see kv_cache.py) and runs the prompt minus its last token
  through the model in chunks, so the KV cache holds everything but the "pending" token;
- each `step` feeds every listed request its pending token (the last prompt token, then the
  last sampled one) in ONE batched forward, samples the next token per request and commits it;
- `release` frees the pages (also on client disconnect).
So every step is the same kind of forward, and a step's time is honest decode time.

Torch work runs in a worker thread (asyncio.to_thread) under one lock: the event loop keeps
streaming while the model computes, and the KV pool is never touched by two threads at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from specscope.engine.kv_cache import KVCache, SeqKV
from specscope.engine.loader import LoadedModel
from specscope.engine.model import ForwardBatch, NewTokens
from specscope.engine.sampling import make_generator, sample
from specscope.serve.backend import BackendError, BackendInfo, BatchStep, SamplingParams, StepOutput

PREFILL_CHUNK = 256  # tokens per prefill forward: bounds the [chunk x context] attention matrix


@dataclass
class Request:
    request_id: str
    params: SamplingParams
    seq: SeqKV
    tokens: list[int]  # prompt + generated; tokens[-1] is pending (its KV is not written yet)
    num_prompt: int
    generator: torch.Generator
    finished: bool = False
    finish_reason: str | None = None
    state: dict[str, Any] = field(default_factory=dict)  # room for drafter state (ENGINE2)

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.num_prompt :]


class EngineBackend:
    def __init__(
        self,
        loaded: LoadedModel,
        kv: KVCache,
        *,
        max_batch: int = 8,
        kv_headroom_tokens: int = 0,
        seed: int | None = None,
    ):
        self.lm, self.model, self.codec, self.kv = loaded, loaded.model, loaded.codec, kv
        self.max_batch = max_batch
        # Extra rows reserved per request beyond prompt + max_tokens (speculative drafts).
        self.kv_headroom_tokens = kv_headroom_tokens
        self.seed = seed
        self.max_context = min(loaded.config.max_position_embeddings, kv.num_pages * kv.page_size)
        self.info = BackendInfo(
            model=loaded.name,
            max_context=self.max_context,
            spec_algorithm=None,
            num_draft_tokens=0,
            page_size=kv.page_size,
            extra={
                "engine": "specscope",
                "kv_alloc": kv.policy,
                "kv_pool_tokens": kv.num_pages * kv.page_size,
                "max_total_tokens": kv.num_pages * kv.page_size,  # serve's token_usage denominator
                "max_batch": max_batch,
                "device": str(loaded.device),
                "dtype": str(loaded.dtype).removeprefix("torch."),
            },
        )
        self.requests: dict[str, Request] = {}
        self._lock = threading.Lock()
        self._deferred_release: set[str] = set()
        # ENGINE2: a SpeculativeStepper (engine/spec/stepper.py) set by attach_speculation; when
        # present it runs the whole step (draft, tree, verify, commit) and frees drafter state.
        self.spec: Any = None

    # -- text ---------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        return self.codec.encode(text)

    def detokenize(self, ids: list[int]) -> str:
        return self.codec.decode(ids)

    def apply_chat_template(self, messages: list[dict[str, Any]]) -> list[int]:
        return self.codec.chat_ids(messages)

    def eos_token_ids(self) -> set[int]:
        return set(self.codec.eos_ids)

    # -- protocol -----------------------------------------------------------------------------
    async def prefill(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> None:
        await asyncio.to_thread(self._locked, self.prefill_sync, request_id, prompt_ids, params)

    async def step(self, request_ids: list[str]) -> BatchStep:
        return await asyncio.to_thread(self._locked, self.step_sync, request_ids)

    def release(self, request_id: str) -> None:
        # Never block the event loop behind a running step: defer to the end of that step.
        if self._lock.acquire(blocking=False):
            try:
                self._release_now(request_id)
            finally:
                self._lock.release()
        else:
            self._deferred_release.add(request_id)

    # -- synchronous core (tests and benchmarks call these directly) ----------------------------
    def _locked(self, fn, *args):
        with self._lock:
            try:
                return fn(*args)
            finally:
                for rid in list(self._deferred_release):
                    self._release_now(rid)
                self._deferred_release.clear()

    def _release_now(self, request_id: str) -> None:
        self.requests.pop(request_id, None)
        self.kv.release(request_id)
        if self.spec is not None:
            self.spec.release(request_id)

    def prefill_sync(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> None:
        if not prompt_ids:
            raise BackendError("empty prompt")
        if request_id in self.requests:
            raise BackendError(f"request id {request_id!r} is already running", 409)
        vocab = self.lm.config.vocab_size
        if any(not 0 <= t < vocab for t in prompt_ids):
            raise BackendError(f"prompt holds token ids outside the vocabulary (0..{vocab - 1})")
        if len(prompt_ids) >= self.max_context:
            raise BackendError(
                f"prompt of {len(prompt_ids)} tokens does not fit the context of {self.max_context}"
            )
        if len(self.requests) >= self.max_batch:
            raise BackendError(f"engine busy: {self.max_batch} requests running (max_batch)", 503)
        rows = min(len(prompt_ids) + max(params.max_tokens, 1), self.max_context)
        seq = self.kv.admit(request_id, rows + self.kv_headroom_tokens)
        seed = params.seed if params.seed is not None else self.seed
        req = Request(
            request_id, params, seq, list(prompt_ids), len(prompt_ids), make_generator(seed)
        )
        try:
            known = prompt_ids[:-1]
            for start in range(0, len(known), PREFILL_CHUNK):
                chunk = known[start : start + PREFILL_CHUNK]
                self.forward([(req, chunk)], compute_logits=False)
        except Exception:
            self.kv.release(request_id)
            raise
        self.requests[request_id] = req

    def forward(
        self, work: list[tuple[Request, list[int]]], compute_logits: bool = True
    ) -> torch.Tensor | None:
        """Append `tokens` to each request's committed KV (causal, consecutive positions) in one
        batched forward; returns logits [B, Q, vocab]. The building block of prefill and decode."""
        items = []
        for req, tokens in work:
            slots = self.kv.alloc_slots(req.seq, len(tokens))
            start = req.seq.context_len
            items.append(
                NewTokens(tokens, list(range(start, start + len(tokens))), slots, req.seq.context)
            )
        batch = ForwardBatch.pack(items, self.lm.device, self.kv.pad_slot)
        logits = self.model(batch, self.kv, compute_logits=compute_logits)
        for (req, _), it in zip(work, items, strict=True):
            self.kv.commit(req.seq, it.write_slots)
        return logits

    def step_sync(self, request_ids: list[str]) -> BatchStep:
        if self.spec is not None:
            return self.spec.step_sync(self, request_ids)
        t0 = time.perf_counter()
        missing = [r for r in request_ids if r not in self.requests]
        if missing:
            raise BackendError(f"unknown or released request(s): {missing}", 404)
        reqs = [self.requests[r] for r in request_ids]
        live = [r for r in reqs if not r.finished]
        timing: dict[str, float] = {}
        new_tokens: dict[str, list[int]] = {}
        if live:
            logits = self.forward([(r, [r.tokens[-1]]) for r in live])
            assert logits is not None
            if logits.is_cuda:
                torch.cuda.synchronize()
            t1 = time.perf_counter()
            timing["verify"] = t1 - t0
            for i, r in enumerate(live):
                p = r.params
                new_tokens[r.request_id] = [
                    sample(logits[i, 0], p.temperature, p.top_p, r.generator)
                ]
        outputs = [self.accept_tokens(r, new_tokens.get(r.request_id, [])) for r in reqs]
        step_s = time.perf_counter() - t0
        if live:
            timing["commit"] = step_s - timing["verify"]
        return BatchStep(outputs=outputs, step_s=step_s, timing=timing)

    def accept_tokens(self, req: Request, tokens: list[int]) -> StepOutput:
        """Commit sampled tokens to a request, applying EOS, stop strings, max_tokens and the
        context limit; tokens after a finishing one are dropped. Speculative steps reuse this
        with several tokens."""
        out = StepOutput(request_id=req.request_id, tokens=[])
        if req.finished:
            out.finished, out.finish_reason = True, req.finish_reason
            return out
        p = req.params
        eos = self.codec.eos_ids
        for tok in tokens:
            if tok in eos and not p.ignore_eos:
                req.finished, req.finish_reason = True, "stop"
                break
            req.tokens.append(tok)
            out.tokens.append(tok)
            if p.stop and self._hits_stop(req):
                req.finished, req.finish_reason = True, "stop"
                break
            if len(req.generated) >= p.max_tokens or len(req.tokens) >= self.max_context:
                req.finished, req.finish_reason = True, "length"
                break
        out.finished, out.finish_reason = req.finished, req.finish_reason
        return out

    def _hits_stop(self, req: Request) -> bool:
        longest = max(len(s) for s in req.params.stop)
        tail = self.codec.decode(req.generated[-(longest + 8) :])
        return any(s and s in tail for s in req.params.stop)
