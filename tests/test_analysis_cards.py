"""The rule cards are the list of what specscope can conclude: ARCHITECTURE §6's table, the
rules that decide them, the finding ids of the JSON contract and the causes are one list."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from specscope.analysis.diagnosis import advice, findings
from specscope.analysis.diagnosis.cards import BY_ID, CARDS, Cause
from specscope.analysis.result import FindingId

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"

CAUSES = [
    "host_per_token",
    "kv_layout",
    "attention_context",
    "acceptance_position",
    "draft_window",
    "acceptance_concurrency",
    "drafter_quality",
    "sampling_temperature",
    "speculation_overhead",
    "graph_mode",
    "stream_coalescing",
    "prefix_cache",
    "client",
]


def _section_6_rows() -> list[list[str]]:
    text = ARCHITECTURE.read_text()
    section = text[text.index("## 6. Findings") : text.index("### 6.1")]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def _card_row(c) -> list[str]:
    return [
        f"`{c.id}`",
        c.claim,
        f"{c.min_effect:g}",
        c.unit or "-",
        ", ".join(f"`{x}`" for x in c.causes),
        "yes" if c.needs_speculation else "no",
    ]


def test_architecture_table_is_the_cards():
    assert _section_6_rows() == [_card_row(c) for c in CARDS]


def test_one_rule_per_card_and_the_contract_names_every_id():
    assert [r.__name__ for r in findings.RULES] == [c.id for c in CARDS]
    assert set(get_args(FindingId)) == set(BY_ID)
    drafter = {r.__name__ for r in findings.NEEDS_SPECULATION}
    assert drafter == {c.id for c in CARDS if c.needs_speculation}


def test_causes_are_the_closed_list_and_every_card_names_some():
    assert [c.value for c in Cause] == CAUSES
    for card in CARDS:
        assert card.causes and card.separates and card.test and card.claim, card.id
    named = {cause for card in CARDS for cause in card.causes}
    # prefix_cache and graph_mode have cards too; every cause is reachable from some finding
    assert named == set(Cause)


@pytest.mark.parametrize("card", CARDS, ids=lambda c: c.id)
def test_every_card_has_its_next_step_and_its_rule_uses_its_thresholds(card):
    text = card.next(None, 1000) if card.next is advice.draft_window else card.next(None)
    assert isinstance(text, str) and len(text) > 20
    assert card.weight > 0
    assert card.next.__module__ == advice.__name__


def test_rule_constants_come_from_the_cards():
    assert BY_ID["acceptance_decay"].min_effect == findings.MIN_DECAY
    assert BY_ID["acceptance_low"].thresholds["commit length without a baseline"] == (
        findings.LOW_COMMIT_ABSOLUTE
    )
    ratio = BY_ID["batching_interference"].thresholds["per-request tps ratio"]
    assert BY_ID["batching_interference"].min_effect == pytest.approx(1 / ratio - 1)
