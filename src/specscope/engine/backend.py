"""EngineBackend: the real decoder behind `serve`'s Backend protocol (continuous batching).

`EngineBackend(model, kv, stepper)`: a loaded model, its paged KV cache, and a stepper (plain,
or speculative) that decides what one step does; the target forward goes through a `Runner`
(eager on CPU, CUDA graphs + paged attention on the GPU fast path).

Life of a request:
- `prefill` admits it (KV reservation, see kv_cache.py) and runs the prompt minus its last token
  through the model in chunks, so the KV cache holds everything but the "pending" token;
- each `step` hands every listed live request to the stepper (plain: feed the pending token,
  sample the next one; speculative: draft, verify, accept), then applies EOS, stop strings and
  limits to what each request committed;
- `release` frees the pages and the stepper's state (also on client disconnect).
So every step is the same kind of forward, and a step's time is honest decode time.

Torch work runs off the event loop under one lock, so the KV pool is never touched by two
threads at once: `serve` drives `prefill_locked` / `step_locked` from its step loop
(serve/step_thread.py: the next step never waits on the event loop), in a process of its own
under `specscope serve` (serve/engine_process.py; `text_side` is what the HTTP process gets);
the async `prefill` / `step` (asyncio.to_thread) remain for callers that await a backend.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

from specscope.backend import BackendError, BackendInfo, BatchStep, SamplingParams, StepOutput
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import LoadedModel
from specscope.engine.overlap import Launched, feed_tokens, to_host
from specscope.engine.request import Request
from specscope.engine.runner import EagerRunner, Runner, Work, extend
from specscope.engine.sampling import make_generator
from specscope.engine.stepper import PlainStepper, Stepper
from specscope.engine.tokenizer import CodecText

PREFILL_CHUNK = 256  # tokens per prefill forward: bounds the [chunk x context] attention matrix
CUDA_PREFILL_CHUNK = 2048  # on a GPU the bound is memory, not time: larger chunks, fewer launches
CUDA_PREFILL_TOKENS = 16384  # requests prefilled together per forward, in tokens


def _prefill_groups(reqs: list[Request], chunk: int, budget: int) -> list[list[Request]]:
    """Requests prefilled together, in order: as many as fit `budget` tokens a forward, each
    counted at its first chunk's length (a 256-token prompt is 256, not a whole chunk: 64 of
    them in one forward on a GPU, where 8 a forward left a batch of 256 arrivals 32 forwards)."""
    groups: list[list[Request]] = []
    used = 0
    for req in reqs:
        size = min(chunk, max(1, len(req.tokens) - 1))
        if groups and used + size <= budget:
            groups[-1].append(req)
            used += size
        else:
            groups.append([req])
            used = size
    return groups


class EngineBackend(CodecText):
    def __init__(
        self,
        loaded: LoadedModel,
        kv: KVCache,
        stepper: Stepper | None = None,
        *,
        runner: Runner | None = None,
        max_batch: int = 8,
        seed: int | None = None,
        overlap: bool = False,
    ):
        self.lm, self.codec, self.kv = loaded, loaded.codec, kv
        self.stepper: Stepper = stepper or PlainStepper()
        # Overlapped steps (engine/overlap.py) for a step loop that drives launch / finish:
        # plain decoding only (a drafter drafts from committed tokens on the host).
        self.overlap = overlap and isinstance(self.stepper, PlainStepper)
        self.runner: Runner = runner or EagerRunner(loaded.model, kv)
        self.max_batch = max_batch
        self.seed = seed
        self.max_context = min(loaded.config.max_position_embeddings, kv.num_pages * kv.page_size)
        spec = self.stepper.speculation()
        # Rows reserved per request past prompt + max_tokens: one verify's pending nodes.
        self._headroom = self.stepper.max_nodes if spec else 0
        self.info = BackendInfo(
            model=loaded.name,
            max_context=self.max_context,
            spec_algorithm=spec.algorithm if spec else None,
            num_draft_tokens=spec.num_draft_tokens if spec else 0,
            page_size=kv.page_size,
            extra={
                "engine": "specscope",
                "kv_alloc": kv.policy,
                "kv_pool_tokens": kv.num_pages * kv.page_size,
                "max_total_tokens": kv.num_pages * kv.page_size,  # serve's token_usage denominator
                "max_batch": max_batch,
                "device": str(loaded.device),
                "dtype": str(loaded.dtype).removeprefix("torch."),
                "fast_path": type(self.runner).__name__,
                "overlap": self.overlap,
                **(spec.extra if spec else {}),
            },
        )
        self.requests: dict[str, Request] = {}
        self._lock = threading.Lock()
        self._deferred_release: set[str] = set()

    # -- text ---------------------------------------------------------------------------------
    def text_side(self) -> CodecText:
        """The text methods alone, picklable (a fresh codec: no compiled chat template)."""
        return CodecText(replace(self.codec, _template=None))

    # -- protocol -----------------------------------------------------------------------------
    async def prefill(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> None:
        await asyncio.to_thread(self._locked, self.prefill_sync, request_id, prompt_ids, params)

    async def step(self, request_ids: list[str]) -> BatchStep:
        return await asyncio.to_thread(self._locked, self.step_sync, request_ids)

    def prefill_locked(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> None:
        """`prefill` for a caller on its own thread (serve's step thread)."""
        self._locked(self.prefill_sync, request_id, prompt_ids, params)

    def prefill_many_locked(self, items: list[tuple[str, list[int], SamplingParams]]) -> None:
        """`prefill_many_sync` for the step loop: the requests waiting at a step boundary
        prefilled together (all or none), not one forward each."""
        self._locked(self.prefill_many_sync, items)

    def step_locked(self, request_ids: list[str]) -> BatchStep:
        """`step` for a caller on its own thread (serve's step thread)."""
        return self._locked(self.step_sync, request_ids)

    def launch_locked(self, request_ids: list[str], previous: Launched | None) -> Launched | None:
        """`launch_sync` for the step loop's thread."""
        return self._locked(self.launch_sync, request_ids, previous)

    def finish_locked(self, launched: Launched) -> BatchStep:
        """`finish_sync` for the step loop's thread."""
        return self._locked(self.finish_sync, launched)

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
        self.stepper.release(request_id)

    def prefill_sync(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> None:
        self.prefill_many_sync([(request_id, prompt_ids, params)])

    def prefill_many_sync(self, items: list[tuple[str, list[int], SamplingParams]]) -> None:
        """Admit several requests (all or none) and prefill them in batched chunks: benches fill
        a batch of 256 long contexts this way; serve admits one at a time."""
        admitted: list[Request] = []
        try:
            for request_id, prompt_ids, params in items:
                admitted.append(self._admit(request_id, prompt_ids, params, admitted))
            cuda = self.kv.device.type == "cuda"
            chunk = CUDA_PREFILL_CHUNK if cuda else PREFILL_CHUNK
            # the CPU's bound is time ([chunk x context] each): one request a forward there
            groups = (
                _prefill_groups(admitted, chunk, CUDA_PREFILL_TOKENS)
                if cuda
                else [[r] for r in admitted]
            )
            for reqs in groups:
                longest = max(len(r.tokens) - 1 for r in reqs)
                for start in range(0, longest, chunk):
                    work = [
                        (r, r.tokens[start : min(start + chunk, len(r.tokens) - 1)])
                        for r in reqs
                        if start < len(r.tokens) - 1
                    ]
                    self._prefill_chunk(work)
        except Exception:
            for req in admitted:
                self.kv.release(req.request_id)
                self.stepper.release(req.request_id)  # e.g. context features already observed
            raise
        for req in admitted:
            self.requests[req.request_id] = req

    def _admit(
        self,
        request_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        admitted: list[Request],
    ) -> Request:
        if not prompt_ids:
            raise BackendError("empty prompt")
        if request_id in self.requests or any(r.request_id == request_id for r in admitted):
            raise BackendError(f"request id {request_id!r} is already running", 409)
        vocab = self.lm.config.vocab_size
        if any(not 0 <= t < vocab for t in prompt_ids):
            raise BackendError(f"prompt holds token ids outside the vocabulary (0..{vocab - 1})")
        if len(prompt_ids) >= self.max_context:
            raise BackendError(
                f"prompt of {len(prompt_ids)} tokens does not fit the context of {self.max_context}"
            )
        if len(self.requests) + len(admitted) >= self.max_batch:
            raise BackendError(f"engine busy: {self.max_batch} requests running (max_batch)", 503)
        rows = min(len(prompt_ids) + max(params.max_tokens, 1), self.max_context)
        seq = self.kv.admit(request_id, rows + self._headroom)
        seed = params.seed if params.seed is not None else self.seed
        return Request(
            request_id, params, seq, list(prompt_ids), len(prompt_ids), make_generator(seed)
        )

    def _prefill_chunk(self, work: list[tuple[Request, list[int]]]) -> None:
        """One prefill forward; a stepper that reads the target's hidden states gets this
        chunk's rows (its drafter's context features) before the chunk is committed."""
        taps = self.stepper.target_taps
        if not taps:
            self.forward(work, compute_logits=False)
            return
        items = [Work(req.seq, tokens) for req, tokens in work]
        _, _, hidden = self.runner.forward_hidden(items, taps, want_logits=False)
        for (req, _tokens), rows in zip(work, hidden, strict=True):
            self.stepper.observe_prefill(req.request_id, rows)
        for w in items:
            self.kv.commit(w.seq, len(w.tokens))

    def forward(self, work: list[tuple[Request, list[int]]], compute_logits: bool = True):
        """Append tokens to each request's committed KV in one batched forward (causal,
        consecutive positions); returns the logits (`runner.Logits`) or None."""
        return extend(self.runner, [Work(req.seq, tokens) for req, tokens in work], compute_logits)

    def _running(self, request_ids: list[str]) -> list[Request]:
        missing = [r for r in request_ids if r not in self.requests]
        if missing:
            raise BackendError(f"unknown or released request(s): {missing}", 404)
        return [self.requests[r] for r in request_ids]

    def launch_sync(self, request_ids: list[str], previous: Launched | None) -> Launched | None:
        """Start a plain greedy decode step over these requests without waiting for it
        (engine/overlap.py); those in `previous`, the step still in flight, feed its argmax
        from the device. None when this batch cannot overlap (overlap off, or a request that
        samples): step it with `step_sync` once `previous` is finished. A request is left out
        once its limit is reached counting the token in flight; one that ended on EOS or a
        stop string in `previous` is in this step too, and `finish_sync` drops its token."""
        t0 = time.perf_counter()
        reqs = self._running(request_ids)
        if not self.overlap or any(r.params.temperature > 0 for r in reqs):
            return None
        in_flight = previous.in_flight() if previous is not None else {}
        live = [
            r for r in reqs if not r.finished and r.room(self.max_context) > (id(r) in in_flight)
        ]
        if not live:
            return Launched([], None, None, None, time.perf_counter() - t0)
        host_tokens, on_device = feed_tokens(live, previous, in_flight, self.kv.device)
        work = [Work(r.seq, [tok]) for r, tok in zip(live, host_tokens, strict=True)]
        _, logits = self.runner.forward(work, True, on_device)
        assert logits is not None
        for w in work:
            self.kv.commit(w.seq, 1)
        tokens_device = logits.argmax_device()[:, 0].clone()
        tokens_host, ready = to_host(tokens_device)
        return Launched(live, tokens_device, tokens_host, ready, time.perf_counter() - t0)

    def finish_sync(self, launched: Launched) -> BatchStep:
        """Wait for a launched step's tokens and commit them as `step_sync` would; requests
        released since, or finished in the step before, get nothing (their token is dropped).
        `step_s`: the host's time in this step's launch and here, the wait included."""
        t0 = time.perf_counter()
        if launched.ready is not None:
            launched.ready.synchronize()
        tokens = [] if launched.tokens_host is None else launched.tokens_host.tolist()
        t1 = time.perf_counter()
        outputs = [
            self.accept_tokens(r, [tok])
            for r, tok in zip(launched.requests, tokens, strict=True)
            if self.requests.get(r.request_id) is r and not r.finished
        ]
        t2 = time.perf_counter()
        timing = {"verify": launched.launch_s + t1 - t0, "commit": t2 - t1}
        return BatchStep(outputs=outputs, step_s=launched.launch_s + t2 - t0, timing=timing)

    def step_sync(self, request_ids: list[str]) -> BatchStep:
        t0 = time.perf_counter()
        reqs = self._running(request_ids)
        live = [r for r in reqs if not r.finished]
        result = self.stepper.step(self.runner, live, self.max_context) if live else None
        outputs = []
        for r in reqs:
            proposal = result.proposals.get(r.request_id) if result else None
            out = self.accept_tokens(r, proposal.tokens if proposal else [])
            if proposal is not None:
                out.accepted_drafts = proposal.accepted_drafts
                out.proposed_drafts = proposal.proposed_drafts
                out.accepted_per_position = proposal.accepted_per_position
            outputs.append(out)
        step_s = time.perf_counter() - t0
        timing = dict(result.timing) if result else {}
        if timing:  # the commit phase also holds the bookkeeping above
            timing["commit"] = step_s - sum(v for k, v in timing.items() if k != "commit")
        return BatchStep(outputs=outputs, step_s=step_s, timing=timing)

    def accept_tokens(self, req: Request, tokens: list[int]) -> StepOutput:
        """Commit sampled tokens to a request, applying EOS, stop strings, max_tokens and the
        context limit; tokens after a finishing one are dropped. Speculative steps reuse this
        with several tokens. Called per request per step, so it works on slices: the tokens
        before the first EOS, capped by the room left; only stop strings need a per-token look
        (each prefix is detokenized)."""
        out = StepOutput(request_id=req.request_id, tokens=[])
        if req.finished:
            out.finished, out.finish_reason = True, req.finish_reason
            return out
        p = req.params
        # A token is appended, then the limits are checked: so at least one fits.
        room = max(1, req.room(self.max_context))
        eos = None if p.ignore_eos else self.codec.eos_ids
        cut = next((i for i, tok in enumerate(tokens) if tok in eos), None) if eos else None
        take = tokens[: min(room, len(tokens) if cut is None else cut)]
        stopped = False
        if p.stop:
            for i, tok in enumerate(take):
                req.tokens.append(tok)
                if self._hits_stop(req):
                    take, stopped = take[: i + 1], True
                    break
        else:
            req.tokens.extend(take)
        out.tokens = take
        # Precedence as token by token: a stop string, then the limits, then the EOS after.
        reason = "stop" if stopped else "length" if len(take) == room else None
        if reason is None and cut is not None:
            reason = "stop"
        if reason is not None:
            req.finished, req.finish_reason = True, reason
        out.finished, out.finish_reason = req.finished, req.finish_reason
        return out

    def _hits_stop(self, req: Request) -> bool:
        longest = max(len(s) for s in req.params.stop)
        tail = self.codec.decode(req.tokens[max(req.num_prompt, len(req.tokens) - longest - 8) :])
        return any(s and s in tail for s in req.params.stop)
