"""Flavor decoders and request bodies on payloads copied from reference/observability.md."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope.probe.flavors import StreamError, make_flavor
from specscope.trace.model import RequestSpec

SPEC = RequestSpec(prompt="hello there", max_tokens=8, ignore_eos=True)


def feed(decoder, payloads):
    return [decoder.on_event(p if isinstance(p, str) else json.dumps(p)) for p in payloads]


def test_sglang_final_chunk_real_example_fields():
    # PR #33518 comment (DSpark block 5, completion_tokens 106), in a final native chunk.
    meta = {
        "id": "a",
        "finish_reason": {"type": "length", "length": 106},
        "prompt_tokens": 9,
        "completion_tokens": 106,
        "cached_tokens": 0,
        "spec_accept_rate": 0.2930232558139535,
        "spec_accept_length": 2.4651162790697674,
        "spec_num_correct_drafts": 63,
        "spec_num_proposed_drafts": 215,
        "spec_verify_ct": 43,
        "spec_correct_drafts_histogram": [11, 14, 11, 4, 0, 3],
    }
    d = make_flavor("sglang").decoder(SPEC, None)
    deltas = feed(
        d,
        [
            {"text": "Hi", "meta_info": {**meta, "finish_reason": None, "completion_tokens": 1}},
            {"text": "Hi there", "meta_info": meta},
            "[DONE]",
        ],
    )
    assert [x.n_tokens for x in deltas if x] == [1, 105]
    assert deltas[1].text == " there"
    assert d.done and d.finish_reason == "length" and d.completion_tokens == 106
    f = d.server_spec
    assert (f.verify_ct, f.accepted_drafts, f.proposed_drafts) == (43, 63, 215)
    assert f.accept_histogram == [11, 14, 11, 4, 0, 3]
    assert f.accept_length == pytest.approx(2.4651, rel=1e-3)
    assert d.token_count_source == "meta_info"


def test_sglang_old_names_and_older_cumulative_verify_ct():
    d = make_flavor("sglang").decoder(SPEC, None)
    feed(
        d,
        [
            {"text": "a", "meta_info": {"completion_tokens": 1, "spec_verify_ct": 0}},
            {
                "text": "ab",
                "meta_info": {
                    "completion_tokens": 4,
                    "spec_verify_ct": 2,
                    "spec_accept_token_num": 1,
                    "spec_draft_token_num": 6,
                    "spec_accept_histogram": [1, 1, 0, 0],
                    "finish_reason": "length",
                },
            },
            "[DONE]",
        ],
    )
    f = d.server_spec
    assert (f.verify_ct, f.accepted_drafts, f.proposed_drafts) == (2, 1, 6)
    assert f.accept_histogram == [1, 1, 0, 0]


def test_sglang_openai_layer_sglext_chunk():
    fl = make_flavor("sglang", api="chat")
    body = fl.build_request(SPEC, 0).body
    assert body["return_spec_tokens_details"] is True and body["ignore_eos"] is True
    d = fl.decoder(SPEC, None)
    feed(
        d,
        [
            {
                "id": "c",
                "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "length"}],
                "usage": {"completion_tokens": 1},
            },
            {
                "id": "c",
                "choices": [],
                "sglext": {
                    "spec_tokens_details": [
                        {
                            "spec_verify_ct": 5,
                            "spec_accept_length": 2.0,
                            "spec_num_correct_drafts": 5,
                        }
                    ]
                },
            },
            {"id": "c", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 10}},
            "[DONE]",
        ],
    )
    assert d.server_spec.source == "sglang.sglext" and d.server_spec.verify_ct == 5
    assert d.completion_tokens == 10 and d.prompt_tokens == 3


def test_vllm_final_usage_chunk_metrics():
    d = make_flavor("vllm").decoder(SPEC, None)
    deltas = feed(
        d,
        [
            {
                "id": "v",
                "choices": [{"index": 0, "text": "a b", "finish_reason": None}],
                "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4},
            },
            {
                "id": "v",
                "choices": [{"index": 0, "text": " c", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5},
            },
            {
                "id": "v",
                "choices": [],
                "usage": {"prompt_tokens": 2, "completion_tokens": 3},
                "metrics": {
                    "speculative_decoding": {
                        "mean_acceptance_length": 2.0,
                        "draft_acceptance_rate": 0.5,
                        "acceptance_histogram": [0, 2, 0],
                        "num_spec_steps": 1,
                        "num_accepted_draft_tokens": 1,
                        "num_draft_tokens": 2,
                        "num_spec_tokens": 2,
                        "per_step_accepted": [1],
                        "per_step_drafted": [2],
                    }
                },
            },
            "[DONE]",
        ],
    )
    assert [x.n_tokens for x in deltas if x] == [2, 1, 0]
    f = d.server_spec
    assert f.source == "vllm.metrics" and f.per_step_accepted == [1] and f.verify_ct == 1
    assert f.accept_length == 2.0 and f.accept_rate == 0.5
    assert d.token_count_source == "usage" and d.done


def test_openai_without_usage_counts_events_or_tokenizer():
    fl = make_flavor("openai")
    chunks = [
        {"choices": [{"index": 0, "text": "ab cd", "finish_reason": None}]},
        {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]},
        "[DONE]",
    ]
    d = fl.decoder(SPEC, None)
    assert [x.n_tokens for x in feed(d, chunks) if x] == [1, 0]
    assert d.token_count_source == "events"
    d2 = fl.decoder(SPEC, lambda text: len(text.split()))
    assert [x.n_tokens for x in feed(d2, chunks) if x] == [2, 0]
    assert d2.token_count_source == "tokenizer"


def test_llamacpp_events_and_final_timings():
    fl = make_flavor("llamacpp")
    body = fl.build_request(SPEC, 0)
    assert body.path == "/completion"
    assert body.body["n_predict"] == 8 and body.body["ignore_eos"] is True
    d = fl.decoder(SPEC, None)
    deltas = feed(
        d,
        [
            {"content": "a", "stop": False},
            {"content": "b", "stop": False, "tokens": [7]},
            {
                "content": "",
                "stop": True,
                "stop_type": "limit",
                "tokens_predicted": 3,
                "tokens_evaluated": 5,
                "timings": {"predicted_n": 3, "draft_n": 347, "draft_n_accepted": 65},
            },
        ],
    )
    assert [x.n_tokens for x in deltas] == [1, 1, 1]  # the final event brings the remainder
    assert d.done and d.finish_reason == "length" and d.prompt_tokens == 5
    f = d.server_spec
    assert (f.proposed_drafts, f.accepted_drafts) == (347, 65)
    assert f.accept_rate == pytest.approx(65 / 347)


@pytest.mark.parametrize("flavor", ["openai", "sglang", "llamacpp"])
def test_server_error_objects_and_bad_json_raise_stream_errors(flavor):
    d = make_flavor(flavor).decoder(SPEC, None)
    with pytest.raises(StreamError) as e:
        d.on_event('{"error": {"message": "out of memory"}}')
    assert e.value.kind == "server_error" and "out of memory" in e.value.message
    with pytest.raises(StreamError) as e:
        d.on_event("{nope")
    assert e.value.kind == "malformed_json"
    with pytest.raises(StreamError):
        d.on_event("[1, 2]")


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["openai", "vllm", "sglang", "llamacpp"]))
def test_decoders_raise_only_stream_errors_on_anything(data, flavor):
    d = make_flavor(flavor).decoder(SPEC, None)
    with contextlib.suppress(StreamError):
        d.on_event(data)


@settings(max_examples=150, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.text(max_size=5),
        lambda c: (
            st.lists(c, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "choices",
                        "usage",
                        "meta_info",
                        "text",
                        "content",
                        "stop",
                        "timings",
                        "metrics",
                        "sglext",
                        "delta",
                        "completion_tokens",
                        "finish_reason",
                        "error",
                        "spec_verify_ct",
                        "draft_n",
                        "tokens",
                    ]
                ),
                c,
                max_size=4,
            )
        ),
        max_leaves=12,
    ),
    st.sampled_from(["openai", "vllm", "sglang", "llamacpp"]),
)
def test_decoders_survive_any_json_shape(obj, flavor):
    d = make_flavor(flavor).decoder(SPEC, None)
    try:
        delta = d.on_event(json.dumps(obj))
    except StreamError:
        return
    assert delta is None or delta.n_tokens >= 0


def test_unknown_flavor_and_unsupported_api():
    with pytest.raises(ValueError):
        make_flavor("tgi")
    with pytest.raises(ValueError):
        make_flavor("vllm", api="native")
