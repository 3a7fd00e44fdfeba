"""The terminal probe table never shows a commit length next to a different tokens-per-chunk
without a line saying why they differ."""

from __future__ import annotations

from specscope.report.probe_terminal import chunks_vs_steps_note


def test_a_commit_length_unlike_tokens_per_chunk_is_explained():
    coalesced = chunks_vs_steps_note(
        {"mean_commit_len": 3.5, "tokens_per_chunk_mean": 7.0, "mean_commit_len_source": "server"}
    )
    assert coalesced and "several verify steps per chunk" in coalesced and "(server)" in coalesced
    split = chunks_vs_steps_note(
        {"mean_commit_len": 3.5, "tokens_per_chunk_mean": 1.0, "mean_commit_len_source": "log"}
    )
    assert split and "splits steps over several events" in split


def test_agreeing_or_unknown_figures_need_no_note():
    assert chunks_vs_steps_note({"mean_commit_len": 3.5, "tokens_per_chunk_mean": 3.6}) is None
    assert chunks_vs_steps_note({"mean_commit_len": None, "tokens_per_chunk_mean": 3.6}) is None
    assert chunks_vs_steps_note({"mean_commit_len": 2.0, "tokens_per_chunk_mean": None}) is None
