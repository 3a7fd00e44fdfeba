"""The fault lab in the suite (issue #35): our engine on this CPU with real SmolLM2 weights, a
fault seeded or none, diagnosed as a user would (`specscope diagnose URL --quick
--no-ignore-eos`, validation/faults.py's cpu size), and the top cause must be the seeded one.
Three rows: the clean plain server (no cause but attention's), host work that grows with the
output (host_per_token), and drafts never accepted (speculation_overhead). Each row is its own
unit of work under xdist (tests/conftest.py), so the three run beside the rest of the suite;
bench/fault_matrix.py runs every row, repeated."""

from __future__ import annotations

import pytest

from specscope.validation import faults as fm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

# name -> the speculation state the diagnosis must read
ROWS = {"clean-plain": "off", "host-work": "off", "no-accept": "on"}


@pytest.mark.parametrize("name", list(ROWS))
def test_a_seeded_fault_is_diagnosed_by_its_cause(name, tmp_path):
    pytest.importorskip("torch")
    row = fm.ROWS_BY_NAME[name]
    outcome = fm.run_row(row, fm.SIZES["cpu"], "cpu", tmp_path, timeout_s=1500)
    said = f"{name}: top cause {outcome.top_cause}; findings {outcome.findings}"
    print(f"\n{said} ({outcome.wall_s:.0f} s)")
    assert outcome.error is None, outcome.error
    assert outcome.speculation == ROWS[name], said
    assert fm.is_right(row, outcome), said
