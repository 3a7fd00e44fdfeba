"""The loopback servers' own rules, which the probe tests' expected numbers rest on."""

from __future__ import annotations

from support.loopback import Schedule, word_tokens


def test_schedule_truncation_keeps_max_tokens():
    s = Schedule(commits=[3, 3, 3]).for_max_tokens(6)
    assert s.commits == [3, 2] and s.completion_tokens == 6


def test_word_tokenizer_counts_village_twice():
    assert len(word_tokens("the village river")) == 4
