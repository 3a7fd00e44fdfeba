"""serve/ over the twin, through real HTTP on 127.0.0.1: OpenAI client, native /generate,
info endpoints, /metrics, validation."""

from __future__ import annotations

import itertools
import json
import urllib.error
import urllib.request

import aiohttp
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from specscope.serve.runner import ServerHandle

pytestmark = pytest.mark.anyio


def _client(srv: ServerHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", timeout=30, max_retries=0)


async def _post(url: str, body: object, raw: bytes | None = None) -> tuple[int, dict]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
        data = raw if raw is not None else json.dumps(body).encode()
        async with s.post(url, data=data, headers={"Content-Type": "application/json"}) as r:
            return r.status, await r.json(content_type=None)


async def _sse(url: str, body: dict) -> list[dict]:
    """Every `data:` event of a stream, in order ([DONE] as the string)."""
    events: list = []
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s,
        s.post(url, json=body) as r,
    ):
        assert r.status == 200
        async for line in r.content:
            text = line.decode().strip()
            if text.startswith("data: "):
                payload = text[6:]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_openai_client_streams_completions(twin_server) -> None:
    srv = twin_server("healthy", time_scale=0.05)
    client = _client(srv)
    stream = client.completions.create(
        model="twin-healthy",
        prompt="the draft model",
        max_tokens=60,
        stream=True,
        stream_options={"include_usage": True},
    )
    texts, usage, finish = [], None, None
    for chunk in stream:
        if chunk.choices:
            texts.append(chunk.choices[0].text)
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    assert usage is not None and usage.completion_tokens == 60 and usage.prompt_tokens == 3
    assert finish == "length"
    assert len("".join(texts).split()) == 60  # one word per token
    assert len([t for t in texts if t]) < 60  # speculative steps: several tokens per chunk
    full = client.completions.create(model="twin-healthy", prompt="the draft model", max_tokens=60)
    assert full.choices[0].text == "".join(texts)  # deterministic text for the same prompt
    assert full.usage.completion_tokens == 60


def test_openai_client_streams_chat_with_continuous_usage(twin_server) -> None:
    srv = twin_server("healthy", time_scale=0.05)
    client = _client(srv)
    stream = client.chat.completions.create(
        model="twin-healthy",
        messages=[{"role": "user", "content": "hello there"}],
        max_tokens=40,
        stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
    )
    cumulative, content = [], ""
    for chunk in stream:
        if chunk.choices:
            content += chunk.choices[0].delta.content or ""
        if chunk.usage:
            cumulative.append(chunk.usage.completion_tokens)
    assert cumulative == sorted(cumulative) and cumulative[-1] == 40
    assert len(content.split()) == 40
    reply = client.chat.completions.create(
        model="twin-healthy", messages=[{"role": "user", "content": "hello there"}], max_tokens=7
    )
    assert reply.choices[0].message.role == "assistant"
    assert reply.usage.completion_tokens == 7


async def test_native_generate_meta_info_matches_truth(twin_server) -> None:
    srv = twin_server("seed-regression", time_scale=0.02)
    events = await _sse(
        srv.url + "/generate",
        {
            "text": "a b c d",
            "sampling_params": {"max_new_tokens": 120, "ignore_eos": True},
            "stream": True,
        },
    )
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] == 120
    assert all("spec_verify_ct" not in c["meta_info"] for c in chunks[:-1])
    final = chunks[-1]["meta_info"]
    truth = srv.backend.truth(final["id"])
    steps = truth["steps"]
    assert final["spec_verify_ct"] == len(steps)
    # one chunk per verify step, or several steps in one where they piled up while the handler
    # was busy (0.2 ms steps on a loaded machine; serve/streaming.py coalesces as SGLang does):
    # every chunk's count is where some step ended
    ends = set(itertools.accumulate(s["commit_len"] for s in steps))
    assert set(counts) <= ends and len(chunks) <= len(steps), (counts, sorted(ends))
    assert final["spec_accept_length"] == pytest.approx(120 / len(steps))
    hist = [0] * 8
    for s in steps:
        hist[s["accepted_drafts"]] += 1
    assert final["spec_accept_histogram"] == hist == final["spec_correct_drafts_histogram"]
    assert final["spec_num_correct_drafts"] == sum(s["accepted_drafts"] for s in steps)
    assert final["spec_num_proposed_drafts"] == 7 * len(steps)
    assert final["finish_reason"] == {"type": "length", "length": 120}
    if len(chunks) == len(steps):  # nothing piled up: each chunk's delta is its step's commit
        deltas = [b - a for a, b in zip([0, *counts], counts, strict=False)]
        assert deltas == [s["commit_len"] for s in steps]
    assert len(chunks[-1]["text"].split()) == 120  # cumulative text


async def test_info_endpoints_and_tokenize(twin_server) -> None:
    srv = twin_server("healthy", time_scale=0.05)
    for body in (
        {"prompt": "one two three"},
        {"text": "one two three"},
        {"content": "one two three"},
    ):
        status, got = await _post(srv.url + "/tokenize", body)
        assert status == 200 and got["count"] == 3 and len(got["tokens"]) == 3
        assert got["max_model_len"] == 32768
    status, _ = await _post(srv.url + "/tokenize", {"nothing": 1})
    assert status == 400
    await _sse(
        srv.url + "/generate",
        {"text": "x", "sampling_params": {"max_new_tokens": 50}, "stream": True},
    )
    async with aiohttp.ClientSession() as s:
        async with s.get(srv.url + "/v1/models") as r:
            models = await r.json()
        assert models["data"][0]["id"] == "twin-healthy"
        for path in ("/get_server_info", "/server_info"):
            async with s.get(srv.url + path) as r:
                info = await r.json()
            state = info["internal_states"][0]
            assert state["avg_spec_accept_length"] == pytest.approx(
                srv.app.state.ctx.scheduler.total_accept_tokens
                / srv.app.state.ctx.scheduler.total_forward_ct
            )
            assert info["speculative_num_draft_tokens"] == 8
            assert info["speculative_draft_window_size"] is None  # healthy: no window
        async with s.get(srv.url + "/health") as r:
            assert r.status == 200


async def test_metrics_parse_and_count_what_was_served(twin_server) -> None:
    srv = twin_server("healthy", time_scale=0.05, decode_log_interval=3)
    total = 0
    for n in (30, 45):
        events = await _sse(
            srv.url + "/generate",
            {"text": "p q", "sampling_params": {"max_new_tokens": n}, "stream": True},
        )
        total += events[-2]["meta_info"]["completion_tokens"]
    async with aiohttp.ClientSession() as s, s.get(srv.url + "/metrics") as r:
        text = await r.text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    value = {f: families[f].samples[0].value for f in families}
    assert value["sglang:generation_tokens"] == total == 75
    steps = value["sglang:spec_verify_steps"]
    assert value["sglang:spec_accept_tokens"] / steps == pytest.approx(
        srv.app.state.ctx.scheduler.avg_spec_accept_length
    )
    assert 1.0 <= value["sglang:spec_accept_length"] <= 8.0
    assert 0.0 <= value["sglang:spec_accept_rate"] <= 1.0
    assert families["sglang:time_to_first_token_seconds"].type == "histogram"
    ttft_count = [
        s.value
        for s in families["sglang:time_to_first_token_seconds"].samples
        if s.name.endswith("_count")
    ]
    assert ttft_count == [2.0]
    itl_count = [
        s.value
        for s in families["sglang:inter_token_latency_seconds"].samples
        if s.name.endswith("_count")
    ]
    assert itl_count[0] > 0
    assert value["sglang:num_running_reqs"] == 0
    # where the steps went: seconds totals over the forward steps, each part counted, none
    # negative, the backend's own time (the twin's simulated step) the largest at this load
    parts = {p: value[f"specscope:step_{p}_seconds"] for p in ("engine", "wait", "post", "between")}
    assert all(v >= 0 for v in parts.values()), parts
    assert value["sglang:forward_steps"] > 0 and parts["engine"] > 0
    assert parts["post"] < parts["engine"], parts


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", {"prompt": "x", "max_tokens": -1}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 10**12}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 40000}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "bogus_field": 1}, "bogus_field"),
        ("/v1/completions", {"prompt": "x", "n": 2}, "n"),
        ("/v1/completions", {"max_tokens": 3}, "prompt"),
        ("/v1/chat/completions", {"messages": [], "max_tokens": 3}, "messages"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0},
            "max_completion_tokens",
        ),
        (
            "/generate",
            {"text": "x", "sampling_params": {"max_new_tokens": -5}},
            "sampling_params.max_new_tokens",
        ),
        ("/generate", {"text": "x", "sampling_params": {"wrong": 1}}, "sampling_params.wrong"),
        ("/v1/completions", {"prompt": "x", "seed": 2**63}, "seed"),
        (
            "/generate",
            {"text": "x", "sampling_params": {"sampling_seed": -(2**63) - 1}},
            "sampling_params.sampling_seed",
        ),
    ],
)
async def test_validation_errors_are_openai_style_400s(twin_url, path, body, param) -> None:
    status, got = await _post(twin_url + path, body)
    assert status == 400
    err = got["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == param and err["code"] == 400 and err["message"]


async def test_a_negative_seed_is_served_and_repeatable(twin_url) -> None:
    """A seed is a signed 64-bit integer (vLLM's protocol): -1 was a 500 (the twin's random
    streams take non-negative entropy); now it is served, and the same seed gives the same text."""
    body = {"prompt": "def add(a, b):", "max_tokens": 6, "seed": -1, "temperature": 1.0}
    first, second = (
        await _post(twin_url + "/v1/completions", body),
        await _post(twin_url + "/v1/completions", body),
    )
    assert first[0] == second[0] == 200
    assert first[1]["choices"][0]["text"] == second[1]["choices"][0]["text"]


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"\xff\xfe", b""])
async def test_bad_json_is_a_400(twin_url, raw) -> None:
    status, got = await _post(twin_url + "/v1/completions", None, raw=raw)
    assert status == 400 and got["error"]["type"] == "invalid_request_error"


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**13), 10**13)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_bodies = st.fixed_dictionaries(
    {},
    optional={
        "prompt": st.text(max_size=30) | st.lists(st.integers(-3, 200), max_size=5) | _json_values,
        "max_tokens": st.integers(-5, 12) | st.integers(10**4, 10**13) | _json_values,
        "stream": st.booleans() | _json_values,
        "temperature": st.floats(-1, 3) | _json_values,
        "stream_options": st.fixed_dictionaries(
            {}, optional={"include_usage": st.booleans(), "bad": st.integers()}
        )
        | _json_values,
        "n": st.integers(0, 3),
        "seed": st.integers(-5, 5) | _json_values,
    },
) | st.dictionaries(st.text(max_size=12), _json_values, max_size=5)


def test_random_bodies_get_200_or_400_never_a_crash(twin_server) -> None:
    """Fuzz: whatever JSON arrives, the answer is a success or an OpenAI-style 4xx."""
    srv = twin_server("healthy", time_scale=0.001)

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
    @given(body=_bodies, path=st.sampled_from(["/v1/completions", "/generate", "/tokenize"]))
    def check(body: dict, path: str) -> None:
        req = urllib.request.Request(
            srv.url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, payload = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, payload = e.code, e.read()
        assert status in (200, 400), (status, payload[:300])
        if status == 400:
            assert set(json.loads(payload)["error"]) == {"message", "type", "param", "code"}

    check()
    assert srv.app.state.ctx.scheduler.running == {}
