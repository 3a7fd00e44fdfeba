"""`EngineBackend.accept_tokens` (EOS, stop strings, max_tokens, the context limit) works on
slices of a step's tokens; these tests hold it to the token-by-token rule it replaced, over
random cases of every kind (one token or several per step, limits hit mid-step)."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from specscope.backend import SamplingParams
from specscope.engine.backend import EngineBackend
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import TINY_CONFIG, random_model
from specscope.engine.request import Request

pytestmark = pytest.mark.engine


class LetterCodec:
    """Token t reads as one letter (t mod 26): stop strings over letters, EOS = {0, 1}."""

    eos_ids = {0, 1}

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(ord("a") + t % 26) for t in ids)


@pytest.fixture(scope="module")
def backend():
    lm = random_model(TINY_CONFIG, device="cpu", dtype=torch.float32, seed=0)
    lm = dataclasses.replace(lm, codec=LetterCodec())
    kv = KVCache.for_model(lm.config, pool_tokens=64, page_size=16)
    return EngineBackend(lm, kv, max_batch=2)


def token_by_token(be, req: Request, tokens: list[int]) -> tuple[list[int], str | None]:
    """The rule as first written: per token, EOS (dropped), then stop strings, then limits."""
    p, got = req.params, []
    for tok in tokens:
        if tok in be.codec.eos_ids and not p.ignore_eos:
            return got, "stop"
        req.tokens.append(tok)
        got.append(tok)
        if p.stop:
            tail = be.codec.decode(req.generated[-(max(len(s) for s in p.stop) + 8) :])
            if any(s and s in tail for s in p.stop):
                return got, "stop"
        if len(req.generated) >= p.max_tokens or len(req.tokens) >= be.max_context:
            return got, "length"
    return got, None


def random_case(rng: random.Random, max_context: int) -> tuple[SamplingParams, list[int], list]:
    params = SamplingParams(
        max_tokens=rng.randrange(0, 12),
        ignore_eos=rng.random() < 0.3,
        stop=rng.choice([None, ["cd"], ["x", "efg"]]),
    )
    prompt = [rng.randrange(2, 26) for _ in range(rng.randrange(1, max_context - 1))]
    steps = [[rng.randrange(0, 8) for _ in range(rng.choice([1, 1, 3, 6]))] for _ in range(8)]
    return params, prompt, steps


def test_slices_agree_with_the_token_by_token_rule(backend):
    rng = random.Random(11)
    for case in range(400):
        params, prompt, steps = random_case(rng, backend.max_context)
        ours = Request(f"o{case}", params, None, list(prompt), len(prompt), None)
        ref = Request(f"r{case}", params, None, list(prompt), len(prompt), None)
        for tokens in steps:
            out = backend.accept_tokens(ours, tokens)
            if ref.finished:
                want, reason = [], ref.finish_reason
            else:
                want, reason = token_by_token(backend, ref, tokens)
                if reason is not None:
                    ref.finished, ref.finish_reason = True, reason
            assert (out.tokens, out.finished, out.finish_reason) == (
                want,
                ref.finished,
                ref.finish_reason,
            ), (case, params, prompt, tokens)
            assert ours.tokens == ref.tokens


def test_the_step_tokens_are_not_aliased(backend):
    """The caller's list is neither kept nor changed (a stepper may reuse it)."""
    req = Request("a", SamplingParams(max_tokens=10, ignore_eos=True), None, [3], 1, None)
    tokens = [4, 5, 6]
    out = backend.accept_tokens(req, tokens)
    assert out.tokens == [4, 5, 6] and out.tokens is not tokens and req.tokens == [3, 4, 5, 6]
