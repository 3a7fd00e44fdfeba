"""Repetition loops, prefix-cache evidence, the per-category table and the routing verdict."""

from __future__ import annotations

from specscope.analysis.steps.repetition import find_loop
from specscope.analysis.workload.by_category import category_table
from specscope.analysis.workload.prefix_cache import prefix_cache
from specscope.analysis.workload.routing import what_changed
from specscope.probe.workloads import material
from specscope.trace.model import Chunk, RequestSpec, RequestTrace


def _trace(
    i: int,
    commits: list[int],
    *,
    category: str | None = None,
    text: str = "",
    prompt: str = "p",
    ttft_ms: int = 100,
    cached: int | None = None,
    fields: dict[str, int] | None = None,
    step_ms: int = 20,
) -> RequestTrace:
    t0 = i * 10**10
    chunks = [Chunk(t_ns=t0 + ttft_ms * 10**6, n_tokens=1)]
    for k, c in enumerate(commits, 1):
        chunks.append(Chunk(t_ns=t0 + (ttft_ms + k * step_ms) * 10**6, n_tokens=c))
    return RequestTrace(
        index=i,
        spec=RequestSpec(prompt=prompt, category=category),
        t_send_ns=t0,
        chunks=chunks,
        completion_tokens=1 + sum(commits),
        text=text,
        t_end_ns=chunks[-1].t_ns,
        cached_tokens=cached,
        delta_fields=fields,
    )


def test_loops_are_found_and_real_text_is_not():
    loop = find_loop("Once upon a time there was a lamp. " + "The island and the valley. " * 30)
    assert loop is not None and loop.period_words == 5 and loop.share > 0.9
    assert loop.unit.startswith("The island")
    assert find_loop("x " * 10) is None  # too short to call
    assert find_loop(material.story()) is None
    for rel, src in material.stdlib_sources()[:10]:
        assert find_loop(src) is None, rel
    # A loop that only starts late, over a small part of the output, is not flagged.
    assert find_loop(material.story() + " Again and again." * 4) is None


def test_category_table_separates_categories_and_shows_loop_inflation():
    loopy = "Start. " + "spam eggs ham " * 40
    traces = [
        _trace(0, [1, 2, 1, 1], category="reasoning", text="a b c d e f"),
        _trace(1, [4, 4, 4, 4], category="code-edit", text=loopy),
        _trace(2, [2, 2, 2, 2], category="code-edit", text="fine text here"),
    ]
    rows = {r["category"]: r for r in category_table(traces)}
    assert (
        rows["reasoning"]["mean_commit_len"] == 5 / 4
        and rows["reasoning"]["commit_source"] == "client"
    )
    assert rows["code-edit"]["mean_commit_len"] == 24 / 8
    assert rows["code-edit"]["looping_requests"] == 1
    assert rows["code-edit"]["mean_commit_len_without_loops"] == 2.0
    assert category_table([_trace(0, [1, 2])]) == []  # no categories: no table


def test_prefix_cache_from_server_counts_and_from_repeat_ttft():
    unique = [_trace(i, [1, 1], prompt=f"p{i}") for i in range(3)]
    pc = prefix_cache(unique)
    assert pc == {"hits": 0, "requests": 3, "cached_tokens": None, "evidence": pc["evidence"]}
    assert "different" in pc["evidence"]
    reported = [_trace(0, [1], prompt="a", cached=0), _trace(1, [1], prompt="b", cached=480)]
    pc = prefix_cache(reported)
    assert pc["hits"] == 1 and pc["cached_tokens"] == 480
    repeats = [
        _trace(0, [1], prompt="same", ttft_ms=900),
        _trace(1, [1], prompt="same", ttft_ms=200),
        _trace(2, [1], prompt="same", ttft_ms=850),
    ]
    pc = prefix_cache(repeats)
    assert pc["hits"] == 1 and pc["cached_tokens"] is None and "repeat TTFT" in pc["evidence"]
    assert prefix_cache([]) is None


def test_what_changed_tells_routing_from_acceptance():
    off = [_trace(0, [2, 2], fields={"content": 100})]
    on = [_trace(1, [2, 2], fields={"reasoning_content": 70, "content": 30})]
    same = {"acceptance_factor": 1.01, "step_time_factor": 0.99}
    v = what_changed(same, off, on, 0.5, 0.51)
    assert v["changed"] == {"acceptance": False, "step_time": False, "ttft": False, "routing": True}
    assert v["verdict"].startswith("only the text's routing changed")
    assert abs(v["routing_shift"]["reasoning_content"] - 0.7) < 1e-9
    v = what_changed({"acceptance_factor": 1.6, "step_time_factor": 1.0}, off, off, 0.5, 0.5)
    assert v["changed"]["acceptance"] and not v["changed"]["routing"]
    assert v["verdict"] == "changed: acceptance"
    # With an interval, the interval decides (here it includes 1: no change).
    v = what_changed(
        {"acceptance_factor": 1.2, "acceptance_factor_ci": [0.9, 1.5], "step_time_factor": 1.0},
        off,
        off,
        0.5,
        0.5,
    )
    assert v["changed"]["acceptance"] is False
    assert "unknown" not in v["verdict"]
    assert "routing" in what_changed(same, [_trace(0, [1])], off, None, 0.5)["verdict"]


def test_copied_share_tells_copying_from_new_text():
    from specscope.analysis.steps.repetition import copied_share

    story = material.story()
    assert copied_share(story, story[:600]) > 0.95  # regurgitated (its last word is cut)
    assert (
        copied_share(
            story,
            "The baker lifted the loaf out of the oven and found, under "
            "the tray, an envelope addressed to someone long gone.",
        )
        == 0.0
    )
    assert copied_share(story, "too short") is None and copied_share(None, story) is None
    rows = category_table(
        [_trace(0, [2, 3, 2], category="long-writing", prompt=story, text=story[:400])]
    )
    assert rows[0]["copied_share"] > 0.9
