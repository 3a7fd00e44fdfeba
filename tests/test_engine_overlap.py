"""Overlapped decode steps (engine/overlap.py, driven by serve/step_thread.StepLoop) commit
exactly what synchronous steps commit: the same tokens and finish reasons per request, through
EOS, stop strings, max_tokens, the context limit, arrivals between steps, a cancellation and a
sampled request that sends the batch back to synchronous steps; and the KV pool is whole after.

On the CPU the "device" is the host, so these check the bookkeeping (which token feeds which
request, what is dropped, when the loop falls back), not the speed; the H200 figures are
`bench/serve_throughput.py --device cuda`'s."""

from __future__ import annotations

import dataclasses
from collections import deque

import pytest
import torch

from specscope.backend import SamplingParams
from specscope.engine.backend import EngineBackend
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import TINY_CONFIG, random_model
from specscope.serve.scheduler import RequestState
from specscope.serve.step_thread import StepLoop

pytestmark = pytest.mark.engine


class LetterCodec:
    """Token t reads as one letter (t mod 26): stop strings over letters; EOS is set per test."""

    def __init__(self, eos_ids: set[int]):
        self.eos_ids = eos_ids

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(ord("a") + t % 26) for t in ids)


def make_backend(overlap: bool, eos_ids: set[int], max_context: int = 1024) -> EngineBackend:
    lm = random_model(TINY_CONFIG, device="cpu", dtype=torch.float32, seed=3)
    config = dataclasses.replace(lm.config, max_position_embeddings=max_context)
    lm = dataclasses.replace(lm, codec=LetterCodec(eos_ids), config=config)
    kv = KVCache.for_model(lm.config, pool_tokens=2048, page_size=4)
    return EngineBackend(lm, kv, max_batch=6, overlap=overlap)


def prompts() -> list[list[int]]:
    return [[(7 * i + 3 * j) % 90 + 2 for j in range(5 + 3 * i)] for i in range(8)]


def run(
    backend: EngineBackend,
    requests: list[tuple[list[int], SamplingParams]],
    *,
    late: int = 3,
    cancel: tuple[int, int] | None = None,
) -> dict[str, tuple]:
    """Drive a StepLoop to the end: half the requests wait at the start, the rest arrive after
    `late` passes; `cancel` = (pass, request index) marks one cancelled then. Returns each
    request's committed tokens and finish reason as the loop's reports gave them."""
    waiting: deque = deque()
    states = [RequestState(f"r{i}", ids, p) for i, (ids, p) in enumerate(requests)]
    half = len(states) // 2
    waiting.extend(states[:half])
    loop = StepLoop(backend, waiting, max_batch=backend.max_batch)
    got: dict[str, list[int]] = {s.request_id: [] for s in states}
    reason: dict[str, str | None] = {s.request_id: None for s in states}
    passes = 0
    while loop.busy or passes <= late:
        if passes == late:
            waiting.extend(states[half:])
        if cancel is not None and passes == cancel[0]:
            states[cancel[1]].cancelled = True
        report = loop.run_pass()
        assert report.error is None, report.error
        for out in report.batch.outputs if report.batch else []:
            assert reason[out.request_id] is None, f"{out.request_id} got tokens after finishing"
            got[out.request_id] += out.tokens
            if out.finished:
                reason[out.request_id] = out.finish_reason
        passes += 1
        assert passes < 500
    assert not backend.requests
    assert backend.kv.free_pages == backend.kv.num_pages, "the KV pool is not whole"
    return {rid: (got[rid], reason[rid]) for rid in got}


def greedy(max_tokens: int, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, **kw)


@pytest.fixture(scope="module")
def reference() -> list[list[int]]:
    """What each prompt generates with no stop at all (for picking EOS and stop strings that
    really occur mid-generation)."""
    out = run(make_backend(False, set()), [(p, greedy(12, ignore_eos=True)) for p in prompts()])
    return [out[f"r{i}"][0] for i in range(len(prompts()))]


@pytest.fixture(scope="module")
def eos(reference) -> set[int]:
    """The token the 3rd request generates 3rd counts as EOS for every request."""
    return {reference[2][2]}


@pytest.fixture(scope="module")
def cases(reference) -> list[tuple[list[int], SamplingParams]]:
    ref = reference
    codec = LetterCodec(set())
    cases = []
    for i, ids in enumerate(prompts()):
        kind = i % 4
        if kind == 0:  # a stop string that occurs at the 4th-5th generated token
            cases.append((ids, greedy(12, stop=[codec.decode(ref[i][3:5])])))
        elif kind == 1:  # max_tokens
            cases.append((ids, greedy(2 + i)))
        elif kind == 2:  # EOS (the `eos` fixture's token)
            cases.append((ids, greedy(12)))
        else:  # EOS ignored: the limit ends it
            cases.append((ids, greedy(9, ignore_eos=True)))
    return cases


def test_overlapped_steps_commit_what_synchronous_steps_commit(cases, eos):
    want = run(make_backend(False, eos), cases)
    got = run(make_backend(True, eos), cases)
    assert got == want
    reasons = {r for _, r in want.values()}
    assert reasons == {"stop", "length"}  # both kinds of end were exercised
    stopped_early = [rid for rid, (toks, r) in want.items() if r == "stop" and len(toks) < 9]
    assert stopped_early, "no request ended on EOS or a stop string before its limit"


def test_a_cancelled_request_in_flight_is_dropped_and_the_rest_agree(cases, eos):
    """The token in flight when the cancellation is seen is dropped: the overlapped stream
    is the synchronous one, less at most that token."""
    want = run(make_backend(False, eos), cases, cancel=(5, 3))
    got = run(make_backend(True, eos), cases, cancel=(5, 3))
    (tokens, reason), (want_tokens, want_reason) = got.pop("r3"), want.pop("r3")
    assert got == want
    assert reason is want_reason is None  # cancelled: no finish reported
    assert len(tokens) > 0 and want_tokens[: len(tokens)] == tokens
    assert len(want_tokens) - len(tokens) <= 1


def test_a_sampled_request_sends_the_batch_back_to_synchronous_steps(cases, eos):
    mixed = list(cases)
    mixed[5] = (mixed[5][0], SamplingParams(max_tokens=6, temperature=0.8, seed=11))
    want = run(make_backend(False, eos), mixed)
    backend = make_backend(True, eos)
    calls = {"step": 0}
    step = backend.step_locked

    def counting_step(ids):
        calls["step"] += 1
        return step(ids)

    backend.step_locked = counting_step
    assert run(backend, mixed) == want
    assert calls["step"] > 0  # the sampled request's steps ran synchronously


def test_a_request_is_never_launched_past_its_limit():
    """The context limit: each request's reservation is exact, so one launch past the limit
    would fail to find a KV row."""
    backend = make_backend(True, set(), max_context=40)
    cases = [(p, greedy(100, ignore_eos=True)) for p in prompts()[2:6]]
    out = run(backend, cases)
    for (prompt, _), (tokens, reason) in zip(cases, out.values(), strict=True):
        assert reason == "length" and len(prompt) + len(tokens) == 40
