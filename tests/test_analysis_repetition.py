"""Repetition loops against the verdict: a loop's steps stay out of the acceptance shape (where
they fake a decay or a window), and the headline says so when loops make most of its requests.

Every request here is real prose (the workload's own texts) streamed one event per verify step,
a word a token; the looping ones end in a sentence the model repeats, as SmolLM2 did on our
engine when asked to generate past its answer."""

from __future__ import annotations

import io
import itertools
import re
from types import SimpleNamespace

from rich.console import Console

from specscope.analysis.diagnosis import facts as fx
from specscope.analysis.diagnosis.diagnose import analyze
from specscope.analysis.headline.headline import headline
from specscope.analysis.headline.measure import (
    StepTable,
    measure,
    step_tables,
    without_loop_steps,
)
from specscope.analysis.steps.reconstruct import reconstruct_steps
from specscope.analysis.steps.repetition import find_loop, loop_start_position
from specscope.analysis.summary import summarize
from specscope.probe.workloads import material
from specscope.report.context import context_from_run
from specscope.report.probe_terminal import render_probe
from specscope.report.terminal import render_terminal
from specscope.trace.model import Chunk, RequestSpec, RequestTrace, Run, RunInfo

PROSE = " ".join([*material.articles(), material.story()]).split()
LOOP_SENTENCE = (
    "The keeper wrote in the logbook that the wind was rising and the glass was falling."
)
UNIT = LOOP_SENTENCE.split()
ANSWER_COMMITS = (1, 2, 1, 2, 2, 1)  # an n-gram drafter on new prose: ~1.5 tokens a step
LOOP_COMMITS = (7, 8)  # the same drafter inside a loop


def _request(
    i: int,
    *,
    answer: int,
    total: int,
    prompt_tokens: int = 400,
    ignore_eos: bool = True,
    tag: str = "full_generation",
    answer_commits: tuple[int, ...] = ANSWER_COMMITS,
    loop_commits: tuple[int, ...] = LOOP_COMMITS,
) -> RequestTrace:
    """Request `i`: `answer` words of prose (its own stretch), then, up to `total` tokens, the
    loop sentence again and again (none when answer >= total). One event per step, 20 ms apart,
    the first event the prefill token; each event carries its words' characters."""
    start = (i * 97) % (len(PROSE) - answer)
    words = PROSE[start : start + answer] + list(
        itertools.islice(itertools.cycle(UNIT), total - answer)
    )
    chunks = [Chunk(t_ns=i * 10**11 + 10**8, n_tokens=1, n_chars=len(words[0]) + 1)]
    pos, commits = 1, itertools.cycle(answer_commits)
    in_loop = itertools.cycle(loop_commits)
    while pos < total:
        k = min(next(commits) if pos < answer else next(in_loop), total - pos)
        chunks.append(
            Chunk(
                t_ns=chunks[-1].t_ns + 20 * 10**6,
                n_tokens=k,
                n_chars=sum(len(w) + 1 for w in words[pos : pos + k]),
            )
        )
        pos += k
    return RequestTrace(
        index=i,
        spec=RequestSpec(
            prompt="Write on.",
            prompt_tokens=prompt_tokens,
            max_tokens=total,
            tag=tag,
            ignore_eos=ignore_eos,
        ),
        t_send_ns=i * 10**11,
        chunks=chunks,
        completion_tokens=total,
        text="".join(w + " " for w in words),
        t_end_ns=chunks[-1].t_ns,
    )


def _run(traces: list[RequestTrace]) -> Run:
    return Run(info=RunInfo(status="complete", kind="diagnose"), requests=traces)


# --- where the loop starts, in tokens -------------------------------------------------------


def test_the_loop_is_real_and_the_prose_is_not():
    looping = _request(0, answer=60, total=240)
    loop = find_loop(looping.text)
    assert loop is not None and loop.period_words == len(UNIT)
    assert loop.unit.startswith("The keeper wrote")
    assert find_loop(_request(1, answer=700, total=700).text) is None


def test_loop_start_is_the_step_that_commits_the_loops_first_token():
    tr = _request(0, answer=60, total=240)
    steps = reconstruct_steps(tr).steps
    start = loop_start_position(tr)
    # the loop's first word is word 60: the step that commits it starts at or just before it
    first = next(s for s in steps if s.output_pos + s.commit_len > 60)
    assert start == first.output_pos and 60 - 2 < start <= 60
    in_loop = [s for s in steps if s.output_pos >= start]
    loop_mean = sum(s.commit_len for s in in_loop) / len(in_loop)
    assert loop_mean > 6  # the loop's steps, not the answer's
    assert loop_start_position(_request(1, answer=700, total=700)) is None


def test_loop_start_without_character_counts_falls_back_to_the_loops_share():
    tr = _request(0, answer=60, total=240)
    bare = tr.model_copy(
        update={"chunks": [c.model_copy(update={"n_chars": 0}) for c in tr.chunks]}
    )
    start = loop_start_position(bare)
    assert start is not None and abs(start - 60) <= 8  # proportional: close, not exact


# --- the acceptance shape without the loops' steps ------------------------------------------


def _shape(run: Run, *, exclude: bool) -> fx.AcceptanceShape:
    m = measure(run, None)
    table, mt = step_tables(m)
    if exclude:
        table, note = without_loop_steps(m, table)
        assert note is not None and "repetition loops" in note
    assert table is not None
    return fx.acceptance_shape(table, mt, source="client steps")


def test_short_requests_that_loop_make_a_decay_that_the_exclusion_removes():
    # Short requests loop after 40 tokens of their answer, long ones never do: pooled, every
    # position past 200 belongs to the long requests (1.5 a step), every one before mixes in
    # the loops (7.5): a "decay" of commit length with output position, made by the loops.
    traces = [_request(i, answer=40, total=200) for i in range(6)]
    traces += [_request(6 + i, answer=700, total=700) for i in range(6)]
    run = _run(traces)
    loopy = _shape(run, exclude=False)
    assert loopy.fit is not None and loopy.fit.decay_present  # what the loops alone make
    clean = _shape(run, exclude=True)
    assert clean.fit is not None
    assert not clean.fit.decay_present and not clean.fit.window_present
    assert clean.table is not None and clean.table.commit.max() <= 2


def test_short_prompts_that_loop_make_a_window_that_the_exclusion_removes():
    # Short prompts loop after 20 tokens, long prompts never do: the long prompts commit less
    # from their first tokens on, which the shape reads as the drafter's window.
    traces = [_request(i, answer=20, total=300, prompt_tokens=200) for i in range(6)]
    traces += [_request(6 + i, answer=300, total=300, prompt_tokens=3000) for i in range(6)]
    run = _run(traces)
    loopy = _shape(run, exclude=False)
    assert loopy.fit is not None and loopy.fit.window_present
    clean = _shape(run, exclude=True)
    assert clean.fit is not None
    assert not clean.fit.window_present and not clean.fit.decay_present


def test_loops_a_drafter_cannot_draft_stay_in_the_acceptance_shape_and_show_its_fall():
    # An n-gram index built from the prompt alone (the prompt-only-ngram fault; measured on the
    # H200: 1.0-1.5 tokens a step inside SmolLM2's loops, 1.2-3.4 before them): the drafts match
    # while the answer follows the prompt, never inside the loop, though the loop repeats text
    # already generated. The loop is where its acceptance falls: kept, the fall is found.
    traces = [
        _request(i, answer=150, total=700, answer_commits=(3, 2, 3), loop_commits=(1,))
        for i in range(6)
    ]
    m = measure(_run(traces), None)
    table, mt = step_tables(m)
    kept, note = without_loop_steps(m, table, checked=True)
    assert kept is table and note is not None
    assert "no more than" in note and "does not draft from the text" in note
    shape = fx.acceptance_shape(kept, mt, source="client steps")
    assert shape.fit is not None and shape.fit.decay_present
    # the step-time fit leaves them out all the same (unchecked): more drafted, dearer steps
    cut, cut_note = without_loop_steps(m, table)
    assert cut is not None and cut.n < table.n and cut_note and "left out" in cut_note


def test_loops_easy_to_draft_are_left_out_when_checked_and_the_note_gives_the_figures():
    traces = [_request(i, answer=150, total=700) for i in range(4)]
    m = measure(_run(traces), None)
    table, _ = step_tables(m)
    cut, note = without_loop_steps(m, table, checked=True)
    assert cut is not None and table is not None and cut.n < table.n
    assert note is not None
    figures = re.search(r"easy to draft \(([\d.]+) tokens a step inside, ([\d.]+) before\)", note)
    assert figures is not None, note
    inside, before = map(float, figures.groups())
    assert 7.0 < inside <= 7.5 and 1.4 < before <= 1.6  # the loop's 7-8 (cut at the end), 1-2


def test_without_loops_keeps_a_run_without_loops_as_it_is():
    m = measure(_run([_request(i, answer=300, total=300) for i in range(4)]), None)
    table, _ = step_tables(m)
    same, note = without_loop_steps(m, table)
    assert same is table and note is None
    empty = StepTable.of([])
    assert without_loop_steps(m, empty) == (empty, None)
    assert without_loop_steps(m, None) == (None, None)


# --- the headline says when loops dominate --------------------------------------------------


def _mixed(looping: int, total: int = 16, *, ignore_eos: bool = True) -> list[RequestTrace]:
    return [
        _request(i, answer=40, total=300, ignore_eos=ignore_eos)
        if i < looping
        else _request(i, answer=300, total=300, ignore_eos=ignore_eos)
        for i in range(total)
    ]


def _headline(traces: list[RequestTrace]):
    return headline(traces, [reconstruct_steps(t) for t in traces])


def test_more_than_half_looping_puts_the_note_beside_the_headline():
    head = _headline(_mixed(11))
    loops = head.loops
    assert loops is not None and loops.dominant and (loops.looping, loops.requests) == (11, 16)
    assert loops.without_loops is not None and 1.4 < loops.without_loops < 1.6
    assert head.mean_commit_len is not None and head.mean_commit_len > 1.8 * loops.without_loops
    note = loops.note
    assert note in head.notes
    assert note.startswith("11 of 16 requests end in repetition loops")
    assert f"commit length {head.mean_commit_len:.2f} over all" in note
    assert f"{loops.without_loops:.2f} without them" in note
    assert "--no-ignore-eos" in note
    j = head.json_fields()["headline_loops"]
    assert j["looping_requests"] == 11 and j["dominant"] and j["note"] == note
    assert _headline(_mixed(9)).loops.note.startswith("9 of 16")  # just over half


def test_half_or_fewer_looping_gives_counts_but_no_note():
    for looping in (8, 3):
        head = _headline(_mixed(looping))
        assert head.loops is not None and not head.loops.dominant
        assert head.loops.note is None and not any("repetition loops" in n for n in head.notes)
        assert head.json_fields()["headline_loops"]["note"] is None
    clean = _headline(_mixed(0))
    assert clean.loops is None and clean.json_fields()["headline_loops"] is None


def test_without_ignore_eos_the_note_does_not_blame_it():
    note = _headline(_mixed(11, ignore_eos=False)).loops.note
    assert note is not None and "by itself" in note and "--no-ignore-eos" not in note


def _printed(render) -> str:
    buf = io.StringIO()
    render(Console(file=buf, width=400, color_system=None))
    return buf.getvalue()


def test_probe_shows_the_note_in_its_summary_table():
    traces = _mixed(11)
    summary = summarize(traces)
    note = summary["headline_loops"]["note"]
    assert note and note.startswith("11 of 16")
    outcome = SimpleNamespace(
        run_dir="/tmp/run",
        info=RunInfo(endpoint="http://x", flavor="openai", api="completions"),
        traces=traces,
        summary=summary,
        detection="",
        notes=[],
        serving=None,
        precision=None,
    )
    out = _printed(lambda c: render_probe(outcome, c, c))
    assert "loops dominate" in out and note in out
    few = summarize(_mixed(8))
    outcome.summary = few
    assert "loops dominate" not in _printed(lambda c: render_probe(outcome, c, c))


def test_diagnose_shows_the_note_in_its_headline_panel_once():
    run = _run(_mixed(11))
    an = analyze(run)
    note = next(n for n in an.notes if n.startswith("11 of 16 requests end in repetition loops"))
    # the verdict says it first (it changes how the commit length reads), the panel beside
    # the figure; --verbose's notes do not print it a third time
    assert f"Repetition loops: {note}." in an.verdict
    for verbose in (False, True):
        out = _printed(
            lambda c, v=verbose: render_terminal(context_from_run(run, an), c, verbose=v)
        )
        verdict, _, after = out.partition("╭")
        panel, _, rest = after.partition("╰")
        assert "Repetition loops: 11 of 16 requests" in verdict
        assert "loops dominate" in panel and "11 of 16 requests" in panel
        assert note[:60] not in rest  # not printed again among the notes
    few_run = _run(_mixed(8))
    few = analyze(few_run)
    assert not any("repetition loops (" in n for n in few.notes)
    assert not any("Repetition loops" in s for s in few.verdict)
    assert "loops dominate" not in _printed(
        lambda c: render_terminal(context_from_run(few_run, few), c)
    )
