"""analysis.precision: the pure decisions of the --precision repeats (narrow enough? how many
more? which limit stops them?), on virtual-time twin requests with known noise."""

from __future__ import annotations

import math

import pytest

from specscope.analysis.headline import precision as pr
from specscope.analysis.headline.uncertainty import MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP as MIN_REQ
from specscope.trace import tags
from specscope.twin import scenario as tw
from specscope.validation import power as pw
from specscope.validation import virtual

UNLIMITED = pr.Budget(seconds=None, tokens=None, max_requests=1000)


def _traces(n: int, *, request_sigma: float = 0.0, seed: int = 0, tokens: int = 300):
    sc = pw.with_tables(tw.load_scenario("healthy"), acceptance={"request_sigma": request_sigma})
    plan = [virtual.PlanItem(tags.FULL_GENERATION, 256, tokens, n)]
    return virtual.scenario_run(sc, plan, seed=seed, run_id="precision-test").run.requests


def _reading(requests: int, hw: float, *, over: bool | None = None, cv: float | None = None):
    over = requests >= MIN_REQ if over is None else over
    return pr.Reading(requests, 100.0, (100.0 * (1 - hw), 100.0 * (1 + hw)), over, cv)


def _decide(r: pr.Reading, target: float = 0.05, budget: pr.Budget = UNLIMITED, **kw):
    kw.setdefault("seconds_per_request", 10.0)
    kw.setdefault("tokens_per_request", 1500)
    return pr.decide(r, target, budget, **kw)


def test_relative_half_width():
    assert pr.relative_half_width(100.0, [90.0, 110.0]) == pytest.approx(0.10)
    assert pr.relative_half_width(None, [1.0, 2.0]) is None
    assert pr.relative_half_width(100.0, None) is None
    assert pr.relative_half_width(100.0, [None, 110.0]) is None


def test_request_cv_is_the_spread_between_request_rates():
    same = [(100.0, 1.0), (200.0, 2.0), (50.0, 0.5)]  # every request at 100 tok/s
    assert pr.request_cv(same) == pytest.approx(0.0, abs=1e-12)
    spread = [(90.0, 1.0), (110.0, 1.0)]  # 90 and 110 tok/s: sd 14.1 over 100
    assert pr.request_cv(spread) == pytest.approx(math.sqrt(200) / 100)
    assert pr.request_cv([(100.0, 1.0)]) is None


def test_reading_is_the_headline_interval_and_says_when_it_is_over_requests():
    few, many = pr.reading(_traces(3)), pr.reading(_traces(MIN_REQ))
    assert few.requests == 3 and not few.over_requests and few.request_cv is not None
    assert many.requests == MIN_REQ and many.over_requests
    assert many.ci[0] < many.decode_tps < many.ci[1]
    failed = _traces(2)
    failed[1] = failed[1].model_copy(update={"error": {"kind": "http", "message": "503"}})
    assert pr.reading(failed).requests == 1
    assert pr.reading([]).decode_tps is None


def test_narrow_interval_over_requests_stops_on_precision():
    d = _decide(_reading(MIN_REQ, 0.04))
    assert d.stopped_by == pr.PRECISION and d.more == 0


def test_narrow_block_interval_of_few_requests_is_not_enough():
    """One long request's block interval can be narrow, but it cannot see how the rate moves
    between prompts: the decision goes on to the request-interval minimum."""
    d = _decide(_reading(1, 0.01))
    assert d.stopped_by is None and d.more == MIN_REQ - 1 and d.needed == MIN_REQ


def test_requests_needed_scale_with_the_square_of_the_ratio():
    assert pr.requests_needed(_reading(10, 0.10), 0.05) == 40
    assert pr.requests_needed(_reading(10, 0.06), 0.05) == math.ceil(10 * 1.2**2)
    # few requests: from their spread, never below the request-interval minimum
    assert pr.requests_needed(_reading(3, 0.02, cv=0.20), 0.05) == math.ceil((pr.Z * 4) ** 2)
    assert pr.requests_needed(_reading(3, 0.02, cv=0.01), 0.05) == MIN_REQ
    with pytest.raises(ValueError):
        pr.requests_needed(_reading(3, 0.02), 0.0)


def test_a_round_at_most_doubles_past_the_minimum():
    d = _decide(_reading(10, 0.20))  # needs 160
    assert d.needed == 160 and d.more == 10


def test_time_budget_limits_and_then_stops_the_repeats():
    budget = pr.Budget(seconds=35.0, tokens=None, max_requests=1000)
    d = _decide(_reading(MIN_REQ, 0.10), budget=budget, spent_s=0.0)
    assert d.stopped_by is None and d.more == 3  # 35 s at 10 s a request
    d = _decide(_reading(MIN_REQ + 3, 0.08), budget=budget, spent_s=31.0)
    assert d.stopped_by == pr.BUDGET and d.more == 0 and d.needed and d.needed > MIN_REQ + 3


def test_token_budget_and_request_cap():
    tokens = pr.Budget(seconds=None, tokens=3000, max_requests=1000)
    assert _decide(_reading(MIN_REQ, 0.10), budget=tokens).more == 2
    assert (
        _decide(_reading(MIN_REQ, 0.10), budget=tokens, spent_tokens=2000).stopped_by == pr.BUDGET
    )
    cap = pr.Budget(seconds=None, tokens=None, max_requests=12)
    assert _decide(_reading(MIN_REQ, 0.10), budget=cap).more == 4
    assert _decide(_reading(12, 0.10), budget=cap).stopped_by == pr.MAX_REQUESTS
    # failed requests count against the cap: a server that fails every repeat cannot loop on
    assert _decide(_reading(3, 0.10), budget=cap, attempted=12).stopped_by == pr.MAX_REQUESTS


def test_no_window_tries_again_then_stops():
    """A request whose reads held its whole generation has no decode window (a server that
    merged its events for a moment): one more request at a time, up to NO_WINDOW_TRIES, and
    never past the budget."""
    nothing = pr.Reading(0, None, None, False, None)
    for tried in range(1, pr.NO_WINDOW_TRIES):
        d = _decide(nothing, attempted=tried)
        assert (d.more, d.stopped_by) == (1, None), d
    d = _decide(nothing, attempted=pr.NO_WINDOW_TRIES)
    assert (d.more, d.stopped_by) == (0, pr.NO_DATA) and f"{pr.NO_WINDOW_TRIES} tried" in d.reason
    spent = pr.Budget(seconds=15.0, tokens=None, max_requests=1000)
    d = _decide(nothing, budget=spent, attempted=1, spent_s=10.0)  # 5 s left, 10 s a request
    assert (d.more, d.stopped_by) == (0, pr.NO_DATA) and "the budget allows no more" in d.reason


def test_noisier_requests_need_more():
    quiet = pr.reading(_traces(MIN_REQ, request_sigma=0.0))
    noisy = pr.reading(_traces(MIN_REQ, request_sigma=0.8))
    assert noisy.relative_half_width > quiet.relative_half_width
    assert pr.requests_needed(noisy, 0.03) > pr.requests_needed(quiet, 0.03)


def test_summary_reports_the_final_interval_beside_what_the_loop_recorded():
    rec = {
        "target": 0.05,
        "stopped_by": "budget",
        "needed": 20,
        "added_requests": 7,
        "budget_s": 60.0,
        "budget_tokens": None,
        "spent_s": 58.2,
        "spent_tokens": 10500,
        "reason": "...",
    }
    s = pr.summary(rec, 100.0, [95.0, 106.0], 8)
    assert s["target"] == 0.05 and s["reached"] == pytest.approx(0.055)
    assert s["requests"] == 8 and s["stopped_by"] == "budget" and s["over_requests"]
    assert not pr.summary(rec, 100.0, [95.0, 106.0], 3)["over_requests"]
    assert pr.summary({"target": 0.05}, None, None, 0)["stopped_by"] == pr.INTERRUPTED
    assert pr.summary({}, 100.0, [95.0, 106.0], 8) is None


def test_the_spread_between_requests_must_agree_before_stopping():
    """A bootstrap interval that reads narrow while the requests' spread says otherwise (few
    requests, a lucky resample) does not stop the loop: the t half-width must be within too."""
    r = _reading(MIN_REQ, 0.04, cv=0.15)  # t(7) x 0.15 / sqrt(8) = 12.5%
    assert r.t_half_width == pytest.approx(2.3646 * 0.15 / math.sqrt(MIN_REQ), rel=1e-3)
    d = _decide(r, 0.05)
    assert d.stopped_by is None and d.needed == math.ceil(MIN_REQ * (r.t_half_width / 0.05) ** 2)
    assert _decide(_reading(MIN_REQ, 0.04, cv=0.05), 0.05).stopped_by == pr.PRECISION


def test_no_stop_on_precision_before_the_committed_count():
    """Once a reading said N requests are needed, a later narrow reading does not stop the
    loop before N: stopping on a chance narrow reading makes intervals cover less often."""
    d = _decide(_reading(12, 0.04, cv=0.05), 0.05, committed=20)
    assert d.stopped_by is None and d.needed == 20 and d.more == 8
    assert _decide(_reading(20, 0.04, cv=0.05), 0.05, committed=20).stopped_by == pr.PRECISION
