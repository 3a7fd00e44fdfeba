"""Every delta field counts: content, reasoning_content, reasoning and tool-call arguments,
with per-field routing and the server's cached-token count."""

from __future__ import annotations

import json

from specscope.probe.flavors import make_flavor
from specscope.trace.model import RequestSpec

SPEC = RequestSpec(prompt="hello", max_tokens=8, api="chat")


def _delta(**delta):
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})


def test_without_usage_every_field_is_counted_and_routed():
    fl = make_flavor("vllm", api="chat")
    d = fl.decoder(SPEC, lambda text: len(text.split()))
    events = [
        _delta(reasoning_content="think about it"),  # SGLang, older vLLM
        _delta(reasoning="newer vllm name"),
        _delta(content="the answer is"),
        _delta(tool_calls=[{"index": 0, "function": {"name": "get_weather", "arguments": ""}}]),
        _delta(
            tool_calls=[{"index": 0, "function": {"arguments": '{"city": "Oslo", "unit": "C"}'}}]
        ),
        json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        "[DONE]",
    ]
    counts = [x.n_tokens for e in events if (x := d.on_event(e)) is not None]
    assert counts == [3, 3, 3, 1, 4, 0]
    assert dict(d.field_tokens) == {
        "reasoning_content": 3,
        "reasoning": 3,
        "content": 3,
        "tool_calls": 5,
    }
    assert "think about it" in "".join(d.text_parts) and "Oslo" in "".join(d.text_parts)


def test_usage_tokens_are_routed_by_characters_and_cached_tokens_read():
    fl = make_flavor("vllm", api="chat")
    d = fl.decoder(SPEC, None)
    ev = {
        "choices": [{"index": 0, "delta": {"reasoning": "abcdef", "content": "xy"}}],
        "usage": {
            "prompt_tokens": 40,
            "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 32},
        },
    }
    assert d.on_event(json.dumps(ev)).n_tokens == 4
    assert dict(d.field_tokens) == {"reasoning": 3, "content": 1}
    assert d.cached_tokens == 32


def test_sglang_native_and_llamacpp_cached_tokens():
    sg = make_flavor("sglang").decoder(RequestSpec(prompt="x"), None)
    sg.on_event(
        json.dumps({"text": "hi", "meta_info": {"completion_tokens": 1, "cached_tokens": 17}})
    )
    assert sg.cached_tokens == 17 and dict(sg.field_tokens) == {"text": 1}
    lc = make_flavor("llamacpp").decoder(RequestSpec(prompt="x"), None)
    lc.on_event(
        json.dumps(
            {
                "content": "",
                "stop": True,
                "stop_type": "limit",
                "tokens_predicted": 3,
                "timings": {"cache_n": 12, "predicted_n": 3},
            }
        )
    )
    assert lc.cached_tokens == 12
