"""`probe --workers N` on one host (probe/workers.py, probe/fleet.py, probe/worker.py): the load
split exactly along the slots, raw traces merged into one run dir that holds the twin's truth, a
worker that dies loses nothing but what it had not handed back, and Ctrl-C keeps what every
worker finished (issue #37)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import multiprocessing as mp
import pickle
import signal
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiohttp import BasicAuth
from rich.console import Console

from specscope.entrypoints.probe import ProbeOptions, probe_run
from specscope.probe.client import Timeouts
from specscope.probe.flavors import FLAVORS, make_flavor
from specscope.probe.fleet import Fleet
from specscope.probe.prompts import LocalCount
from specscope.probe.worker import WORKER_LOST, ClockFit, WorkerSetup, split_shares
from specscope.report.probe_terminal import render_probe
from specscope.trace import load_run
from specscope.trace.model import Chunk, RequestSpec, RequestTrace
from specscope.trace.rundir import trace_line
from support.diagnose import cli
from support.twin_truth import timed_truth, truth_rows

# 384 tokens at concurrency 32: ~110 steps of ~0.09 s, a decode window of ~10 s. A stream's
# first token-bearing read comes late by the server's start of every stream's response (the twin
# answers once the first step is done: all 32 preludes run before any first chunk is written),
# its last read by one data write: the window is short by that difference, which grows with the
# streams started at once and the machine's load. At concurrency 64 and 96 tokens (~3 s windows)
# it took 0.15-0.67% off the step time here under load and 3.2% once in CI; at this shape
# 0.03-0.04% beside two busy processes (a one-off copy of this test that kept each request's
# reads and the twin's step-end stamps, 2026-12-05).
SHAPE = ("--prompt-tokens", "16", "--max-tokens", "384")


def _specs(n: int) -> list[RequestSpec]:
    return [RequestSpec(prompt=f"p{i}") for i in range(n)]


def test_shares_split_the_slots_and_requests_exactly():
    # concurrency 64, repeat 2, 2 workers: 32 slots and 64 requests each
    specs = _specs(128)
    a, b = split_shares([0, 1], specs, 64)
    assert (a.concurrency, a.slot_offset, b.concurrency, b.slot_offset) == (32, 0, 32, 32)
    assert len(a.indices) == len(b.indices) == 64
    assert sorted(a.indices + b.indices) == list(range(128))
    # request i goes to the owner of slot i mod C, with the single run's prompt
    assert all(i % 64 < 32 for i in a.indices) and all(i % 64 >= 32 for i in b.indices)
    assert all(s.prompt == f"p{i}" for i, s in zip(b.indices, b.specs, strict=True))
    # uneven: 7 slots over 3 workers (3, 2, 2), 15 requests from index 100 (a later round)
    shares = split_shares([0, 1, 2], _specs(15), 7, first_index=100)
    assert [s.concurrency for s in shares] == [3, 2, 2]
    assert [s.slot_offset for s in shares] == [0, 3, 5]
    assert [len(s.indices) for s in shares] == [7, 4, 4]  # slots 0-2 get requests 0-2, 7-9, 14
    assert sorted(i for s in shares for i in s.indices) == list(range(100, 115))
    # workers named by id (a lost one left out), fewer requests than slots
    shares = split_shares([0, 2], _specs(1), 4)
    assert [(s.worker, s.indices) for s in shares] == [(0, (0,)), (2, ())]


@pytest.mark.parametrize("flavor", sorted(FLAVORS))
def test_what_a_worker_is_given_crosses_processes(flavor):
    """A spawned worker gets its setup and shares pickled: every flavor, the URL's credentials,
    and a --tokenizer count (a class, not a closure) must survive it."""
    made = make_flavor(flavor, api="chat", model="m")
    made.variant = 1  # what the driver's client learned (its request ladder) goes along
    setup = WorkerSetup(
        "http://h:1", made, Timeouts(total=5.0), "key", BasicAuth("u", "p"), LocalCount(_Words())
    )
    back = pickle.loads(pickle.dumps(setup))
    assert back.flavor.name == made.name and back.flavor.api == "chat" and back.flavor.variant == 1
    assert back.auth == BasicAuth("u", "p") and back.timeouts.total == 5.0
    assert back.local_count("two words") == 2 and back.local_count("x y z", special=False) == 3
    [share] = split_shares([0], _specs(3), 2)
    assert pickle.loads(pickle.dumps(share)) == share


class _Words:
    """A stand-in tokenizer (picklable, as `tokenizers.Tokenizer` is)."""

    def encode(self, text: str, add_special_tokens: bool = True):
        return SimpleNamespace(ids=text.split())


def test_a_clock_fit_takes_the_least_delayed_ping():
    # worker clock = driver clock - 1000 ns; the second ping has the least delay (40 ns)
    fit = ClockFit.from_pings([(0, -900, 300), (1000, 20, 1040), (2000, 1100, 2500)])
    assert (fit.offset_ns, fit.uncertainty_ns) == (1000, 20)


def test_two_local_workers_hold_the_twins_truth(twin_server, fast_scenario, tmp_path):
    srv = twin_server(fast_scenario)
    out = tmp_path / "run"
    args = ("--workers", "2", "--concurrency", "32", "--repeat", "2", "--json")
    res = cli("probe", srv.url, *SHAPE, *args, "--out", str(out), home=tmp_path)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)["summary"]
    assert summary["requests"] == 64 and summary["errors"] == 0
    run = load_run(out)
    assert [t.index for t in run.requests] == list(range(64))
    # request i ran on a slot of the worker owning slot i mod 32 (worker 0: slots 0-15), and
    # carries its own index' prompt (its reference number), as in a single process
    assert all(t.concurrency_slot // 16 == t.index % 32 // 16 for t in run.requests)
    assert {t.concurrency_slot for t in run.requests} == set(range(32))
    assert all(f".{t.index:04d}]" in str(t.spec.prompt) for t in run.requests)
    commit, step = timed_truth(run.requests, srv.backend.truth)
    # under load a stream's steps may merge in a read; the headline then takes the twin's own
    # per-request fields, which hold the same truth
    assert summary["mean_commit_len_source"] in ("client", "server")
    said = f"{summary}\n{truth_rows(run.requests, srv.backend.truth)}"
    assert summary["mean_commit_len"] == pytest.approx(commit, rel=0.01), said
    assert summary["mean_step_s"] == pytest.approx(step, rel=0.01), said
    client = summary["client"]
    assert client["during_decode"] and not client["limits_step_time"]
    workers = client["workers"]
    assert [w["worker"] for w in workers] == [0, 1] and len({w["pid"] for w in workers}) == 2
    for w in workers:
        assert w["transport"] == "process" and w["clock_shared"] and w["lost"] is None
        assert w["decode_samples"] > 0 and 0 <= w["lag_p50_s"] <= w["lag_p99_s"]
        # one host, one clock: the fitted offset is within its own uncertainty of 0
        assert abs(w["clock_offset_s"]) <= w["clock_uncertainty_s"] + 1e-9
        assert w["clock_applied_s"] == 0.0
    assert len(run.client) == 2 and run.info.args["workers"] == 2


def _options(url: str, tmp_path, **kw) -> ProbeOptions:
    return ProbeOptions(
        url=url, prompt_tokens=16, max_tokens=40, out=tmp_path / "run", workers=2, **kw
    )


def _kill_worker_after_its_first(slots: range):
    """A progress hook that SIGKILLs worker 1 when its first request comes back."""
    seen: list[int] = []

    def hook(_total: int):
        def on(trace) -> None:
            if trace.concurrency_slot in slots and not seen:
                seen.append(trace.index)
                [proc] = [p for p in mp.active_children() if p.name == "specscope-worker-1"]
                proc.kill()

        return contextlib.nullcontext(on)

    return hook, seen


def test_a_worker_that_dies_mid_run_loses_no_trace(twin_server, fast_scenario, tmp_path):
    srv = twin_server(fast_scenario)
    options = _options(srv.url, tmp_path, concurrency=4, repeat=4)  # worker 1: slots 2, 3
    hook, seen = _kill_worker_after_its_first(range(2, 4))
    outcome = asyncio.run(probe_run(options, hook))
    assert seen, "worker 1 handed nothing back"
    run = load_run(outcome.run_dir)
    assert [t.index for t in run.requests] == list(range(16))  # every request is there
    by_worker = {0: [], 1: []}
    for t in run.requests:
        by_worker[t.concurrency_slot // 2].append(t)
    assert all(t.ok for t in by_worker[0])  # the other worker lost nothing
    kept = [t for t in by_worker[1] if t.ok]
    lost = [t for t in by_worker[1] if not t.ok]
    assert seen[0] in {t.index for t in kept}  # what it finished is kept, measured
    assert all(t.completion_tokens == 40 for t in kept)
    assert lost and {t.error.kind for t in lost} == {WORKER_LOST}
    assert all("SIGKILL" in t.error.message for t in lost), lost[0].error
    assert outcome.summary["errors"] == len(lost) and run.info.status == "complete"
    worker1 = outcome.summary["client"]["workers"][1]
    assert "SIGKILL" in worker1["lost"] and worker1["samples"] == 0
    assert not mp.active_children()
    # the terminal says it: how many measured, and which was lost and how
    shown = io.StringIO()
    render_probe(outcome, Console(file=shown, width=400), Console(file=io.StringIO()))
    assert "2 process workers on this host" in shown.getvalue()
    assert "worker lost" in shown.getvalue() and "SIGKILL" in shown.getvalue()


def test_ctrl_c_keeps_what_every_worker_finished(twin_server, fast_scenario, tmp_path):
    srv = twin_server(fast_scenario)
    options = _options(srv.url, tmp_path, concurrency=4, repeat=6)
    finished: list[int] = []
    ignoring: list[bool] = []

    async def interrupted() -> None:
        main = asyncio.current_task()

        def hook(_total: int):
            def on(trace) -> None:
                finished.append(trace.index)
                if len(finished) == 1:
                    ignoring.extend(_ignores_sigint(p.pid) for p in mp.active_children())
                if len(finished) == 6:  # what asyncio.run does on Ctrl-C: cancel the main task
                    main.cancel()

            return contextlib.nullcontext(on)

        return await probe_run(options, hook)

    outcome = asyncio.run(interrupted())
    # the probe summarises what was measured, as diagnose does, and says it was interrupted
    assert outcome.interrupted and outcome.summary["ok"] >= 6
    run = load_run(tmp_path / "run")
    assert run.info.status == "partial"
    assert 6 <= len(run.requests) < 24
    kinds = Counter(t.error.kind if t.error else "ok" for t in run.requests)
    assert set(kinds) <= {"ok", "cancelled"} and kinds["ok"] >= 6, kinds
    # both workers handed back, finished and in flight alike
    assert {t.concurrency_slot // 2 for t in run.requests if t.ok} == {0, 1}
    assert {t.concurrency_slot // 2 for t in run.requests if not t.ok} == {0, 1}
    assert len(run.client) == 2 and all(r["lag_us"] for r in run.client)
    assert not mp.active_children()
    # the terminal's Ctrl-C reaches the whole process group: the workers ignore it (from their
    # start, imports included) and the driver stops them
    assert len(ignoring) == 2 and all(ignoring)


def _ignores_sigint(pid: int) -> bool:
    """Whether the process ignores SIGINT (its SigIgn mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    raise AssertionError(f"no SigIgn for pid {pid}")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--workers", "0"), "--workers must be within 1..256, got 0"),
        (("--workers", "3", "--concurrency", "2"), "--workers 3 exceeds --concurrency 2"),
        (("--ray-address", " "), "--ray-address must name a Ray cluster"),
    ],
)
def test_bad_worker_flags_are_one_line(tmp_path, flags, message):
    res = cli("probe", "http://127.0.0.1:9", *flags, home=tmp_path)
    assert res.exit_code == 2 and message in res.output, res.output
    assert "Traceback" not in res.output


def test_ray_address_without_ray_is_one_line(tmp_path, monkeypatch):
    from specscope.probe import runners

    monkeypatch.setattr(runners, "ray_installed", lambda: False)
    res = cli("probe", "http://127.0.0.1:9", "--ray-address", "local", home=tmp_path)
    assert res.exit_code == 2, res.output
    assert "--ray-address needs Ray, which is not installed: pip install 'specscope[scale]'" in (
        res.output
    )


def test_workers_that_do_not_start_are_one_line_and_leave_nothing(
    twin_server, fast_scenario, tmp_path, monkeypatch
):
    from specscope.probe import workers

    srv = twin_server(fast_scenario)
    monkeypatch.setattr(workers, "START_TIMEOUT_S", 0.0)  # no spawned child says hello so soon
    out = tmp_path / "run"
    res = cli("probe", srv.url, *SHAPE, "--workers", "2", "--concurrency", "2", "--out", str(out),
              home=tmp_path)  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "did not start within 0 s" in res.output and "Traceback" not in res.output
    assert load_run(out).info.status == "failed" and not load_run(out).requests
    assert not mp.active_children()


def test_diagnose_runs_its_plan_on_workers(tmp_path, monkeypatch):
    """`diagnose --workers 2`: every step of the plan goes through the workers (the concurrency
    sweep's second slot on the second worker), one run dir, both workers' lag in `client`."""
    from specscope.entrypoints import DiagnoseOptions, diagnose_run
    from specscope.entrypoints.diagnose import EmbeddedChoice
    from specscope.experiments.probe_target import ProbeTarget

    async def not_here(*_a, **_k):
        raise AssertionError("the driver sent a request itself")

    monkeypatch.setattr(ProbeTarget, "send", not_here)  # the spawned workers do not see this

    options = DiagnoseOptions(
        out=tmp_path / "run",
        prompt_tokens=128,
        max_tokens=96,
        quick=True,
        concurrency_levels=(1, 2),
        embedded=EmbeddedChoice(scenario="healthy", time_scale=0.2),
        workers=2,
    )
    done = diagnose_run(options)
    run = done.run
    assert run.info.status == "complete", run.info.status_reason
    assert run.info.args["workers"] == 2 and not run.errors
    assert len({t.index for t in run.requests}) == len(run.requests)
    assert {t.concurrency_slot for t in run.requests} == {0, 1}  # slot 1: worker 1's
    assert done.analysis.decode_tps and done.analysis.mean_commit_len
    assert [r["worker"] for r in run.client] == [0, 1]
    assert all(r["transport"] == "process" and r["lag_us"] for r in run.client)
    assert not mp.active_children()


class _OtherHost(Fleet):
    """A fleet whose workers read another boot's clock, 5 us behind the driver's (no process:
    the transport answers each share at once), to check the driver's side alone."""

    transport = "fake"

    async def _open(self) -> None:
        for s in self.workers:
            s.clock, s.host, s.fit = "another-boot", "elsewhere", ClockFit(5_000, 100)

    async def _job(self, share) -> None:
        for i, spec in zip(share.indices, share.specs, strict=True):
            chunk = Chunk(t_ns=2_000, n_tokens=1)
            trace = RequestTrace(
                index=i, spec=spec, t_send_ns=1_000, t_end_ns=3_000, chunks=[chunk]
            )
            self.events.put_nowait((share.worker, "trace", trace_line(trace)))
        self.events.put_nowait((share.worker, "done", None))

    async def _stop(self, worker: int) -> None:
        return None

    async def _close(self) -> None:
        for s in self.workers:
            s.record = {"worker": s.worker, "pid": 7, "t0_ns": 10, "t_us": [0, 5], "lag_us": [1, 2]}


def test_another_hosts_stamps_are_moved_onto_the_drivers_clock():
    got: list[RequestTrace] = []

    async def run() -> list[dict]:
        setup = WorkerSetup("http://h:1", make_flavor("vllm"), Timeouts())
        async with _OtherHost(2, setup) as fleet:
            await fleet.run(_specs(4), 2, got.append, 10)
        return fleet.records()

    records = asyncio.run(run())
    assert sorted(t.index for t in got) == [10, 11, 12, 13]
    assert all((t.t_send_ns, t.chunks[0].t_ns, t.t_end_ns) == (6_000, 7_000, 8_000) for t in got)
    for r in records:
        assert r["t0_ns"] == 5_010 and not r["clock_shared"] and r["host"] == "elsewhere"
        assert (r["clock_offset_s"], r["clock_applied_s"]) == (5e-6, 5e-6)
        assert r["clock_uncertainty_s"] == 1e-7 and r["transport"] == "fake"
