"""Exact-length prompts through a server's tokenize endpoint, and flavor detection."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from specscope.probe.client import Timeouts, new_session
from specscope.probe.detect import detect
from specscope.probe.prompts import PromptError, fit_units, server_counter, synthetic_frame
from specscope.probe.workloads import PromptSource, resolve_workload
from support.loopback import (
    LoopbackServer,
    Schedule,
    free_port,
    llamacpp_app,
    openai_app,
    sglang_app,
    word_tokens,
)


async def _count_words(text: str) -> int:
    return len(word_tokens(text))


def _source(workload: str = "mixed", unique: bool = True) -> PromptSource:
    return PromptSource(_count_words, resolve_workload(workload), unique=unique)


@pytest.mark.parametrize("n", [1, 2, 7, 64, 333])
def test_build_prompt_hits_exact_length(n):
    for i in range(7):
        p = asyncio.run(_source().prompt(n, i))
        assert p.exact and p.tokens == n == len(word_tokens(p.text)), (p.category, p.tokens)


def test_prompts_vary_per_index_and_content_is_deterministic():
    a = asyncio.run(_source().prompts(50, 3))
    b = asyncio.run(_source().prompts(50, 3))
    assert len({p.text for p in a}) == 3
    assert {p.text for p in a}.isdisjoint({p.text for p in b})  # a second run differs
    assert [p.text.split("\n", 1)[1] for p in a] == [p.text.split("\n", 1)[1] for p in b]
    same = asyncio.run(_source(unique=False).prompts(50, 3))
    assert len({p.text for p in same}) == 1


def test_synthetic_workload_is_still_exact_and_named():
    p = asyncio.run(_source("synthetic").prompt(40, 0))
    assert p.exact and p.tokens == 40 and p.category == "synthetic"


def test_unreachable_length_returns_closest_not_exact():
    async def bos_plus_two_per_word(text: str) -> int:
        return 1 + 2 * len(text.split())

    p, _ = asyncio.run(fit_units(bos_plus_two_per_word, synthetic_frame(0, 10), 10))
    assert not p.exact and abs(p.tokens - 10) == 1
    with pytest.raises(PromptError):
        asyncio.run(fit_units(_count_words, synthetic_frame(0, 1), 0))


@pytest.mark.parametrize(
    "make_app, flavor",
    [
        (lambda: sglang_app(Schedule()), "sglang"),
        (lambda: openai_app(Schedule()), "vllm"),
        (lambda: llamacpp_app(Schedule()), "llamacpp"),
    ],
)
def test_server_tokenize_endpoints(make_app, flavor):
    from specscope.probe.flavors import make_flavor

    async def go(url):
        async with new_session(Timeouts()) as s:
            found = await server_counter(s, url, make_flavor(flavor).tokenize_endpoints)
            assert found is not None
            count, how = found
            p = await PromptSource(count, resolve_workload("chat")).prompt(40, 1)
            return p, how

    with LoopbackServer(make_app()) as srv:
        p, how = asyncio.run(go(srv.url))
    assert p.exact and len(word_tokens(p.text)) == 40
    assert how == "POST /tokenize"


async def _detect(url: str, flavor: str = "auto"):
    async with new_session(Timeouts(connect=2.0)) as s:
        return await detect(s, url, flavor=flavor, timeout_s=3.0)


@pytest.mark.parametrize(
    "make_app, expected",
    [
        (lambda: sglang_app(Schedule()), "sglang"),
        (lambda: openai_app(Schedule()), "vllm"),
        (lambda: openai_app(Schedule(), owner="vllm", version=False), "vllm"),
        (lambda: llamacpp_app(Schedule()), "llamacpp"),
        (lambda: openai_app(Schedule(), owner="openai", version=False), "openai"),
    ],
)
def test_detect_flavor(make_app, expected):
    with LoopbackServer(make_app()) as srv:
        d = asyncio.run(_detect(srv.url))
    assert d.reachable and d.flavor == expected, d
    assert d.model == "test-model"


def test_detect_sglang_server_info_alias_and_override():
    async def info(_):
        return web.json_response({"internal_states": [{"avg_spec_accept_length": 3.1}]})

    a = web.Application()
    a.router.add_get("/server_info", info)
    with LoopbackServer(a) as srv:
        d = asyncio.run(_detect(srv.url))
        assert d.flavor == "sglang" and d.server_info["internal_states"]
        assert asyncio.run(_detect(srv.url, flavor="vllm")).flavor == "vllm"


def test_detect_unreachable():
    d = asyncio.run(_detect(f"http://127.0.0.1:{free_port()}"))
    assert not d.reachable and d.error
