"""What goes on the wire when verify steps pile up before the handler reads them."""

import pytest

from specscope.backend import SamplingParams
from specscope.serve.metrics import ServeMetrics
from specscope.serve.scheduler import RequestState, StepEvent
from specscope.serve.streaming import emissions

pytestmark = pytest.mark.anyio


def _step(n: int, start: int, finished: bool = False) -> StepEvent:
    return StepEvent(list(range(start, start + n)), n - 1, finished, "length" if finished else None)


async def _emit_all(commits: list[int], interval: int, per_token: bool = False) -> list[int]:
    """Every step but the last queued before the handler looks (a busy handler); the last one
    arrives after the first emission. Returns the cumulative counts sent."""
    state = RequestState("r", [1], SamplingParams(max_tokens=sum(commits)))
    pos, steps = 0, []
    for i, n in enumerate(commits):
        steps.append(_step(n, pos, finished=i == len(commits) - 1))
        pos += n
    for ev in steps[1:-1]:
        state.events.put_nowait(ev)
    sent = []
    async for em in emissions(state, steps[0], ServeMetrics("m"), interval, per_token):
        if not sent:
            state.events.put_nowait(steps[-1])
        sent.append(em.completion_tokens)
    return sent


async def test_piled_up_steps_end_chunks_only_on_the_stream_interval():
    # 3+3+3+3+2 queued, cumulative 3, 6, 9, 12, 14: the chunk ends at 12, the 2 wait for the end
    sent = await _emit_all([3, 3, 3, 3, 2, 5], interval=4)
    assert sent == [12, 19]


async def test_piled_up_steps_keep_the_tail_for_the_next_point():
    # 4+1+3+3 queued (cumulative 4, 5, 8, 11): the chunk ends at 8; 11 and the last 2 at the end
    sent = await _emit_all([4, 1, 3, 3, 2], interval=4)
    assert sent == [8, 13]


async def test_interval_one_merges_everything_queued():
    assert await _emit_all([2, 3, 1], interval=1) == [5, 6]


async def test_per_token_events_split_the_burst():
    assert await _emit_all([2, 3], interval=1, per_token=True) == [1, 2, 3, 4, 5]
