"""The host faults of serve (docs/faults.md): parsed from `--fault NAME[=VALUE]`, each a real
mechanism whose work grows with the output, and off by default (the incremental detokenizer)."""

from __future__ import annotations

import time

import pytest

from specscope.serve import faults
from specscope.serve.textstream import FullTextStream, TextStream


def test_faults_parse_and_leave_the_backends_to_it():
    host, rest = faults.parse_host_faults(
        ["detok-full", "host-per-token=40", "spec-no-accept", "prompt-only-ngram"]
    )
    assert host == faults.HostFaults(detok_full=True, host_per_token_us=40.0)
    assert rest == ["spec-no-accept", "prompt-only-ngram"]
    assert host.names == ["detok-full", "host-per-token=40"]
    assert faults.parse_host_faults([]) == (faults.HostFaults(), [])


@pytest.mark.parametrize(
    ("spec", "words"),
    [("detok-full=1", "takes no value"), ("host-per-token=", "µs per token"),
     ("host-per-token=-5", "must be > 0"), ("host-per-token=abc", "µs per token")],
)  # fmt: skip
def test_bad_fault_values_say_which(spec, words):
    with pytest.raises(faults.FaultError, match=words):
        faults.parse_host_faults([spec])


def test_without_a_fault_the_step_loop_does_no_text_work_and_detok_full_renders_it_all():
    def decode(ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    assert faults.HostFaults().step_work(decode) is None
    assert type(faults.HostFaults(detok_full=True).step_work(decode)) is FullTextStream
    scan = faults.HostFaults(host_per_token_us=3).step_work(decode)
    assert type(scan) is faults.StopScanStream and type(scan._inner) is TextStream


def test_host_per_token_scans_the_whole_text_more_as_the_output_grows(monkeypatch):
    """Each step scans all the text so far, repeated so that the scans cost ~US µs per token so
    far: the characters scanned a step grow with the tokens generated (a scan costing 1 ns a
    character and nothing per call stands for the machine)."""
    scanned: list[int] = []
    monkeypatch.setattr(faults, "scan_cost", lambda: (0.0 + 1e-12, 1e-9))
    monkeypatch.setattr(faults, "_found_stop", lambda text: scanned.append(len(text)))
    stream = faults.HostFaults(host_per_token_us=2.0).step_work(
        lambda ids: bytes(ids).decode("utf-8", errors="replace")
    )
    per_step = []
    for _ in range(200):
        before = sum(scanned)
        stream.add(list(b"word"))  # 4 tokens, 4 characters a step
        per_step.append(sum(scanned) - before)
    # ~2 µs per token so far at 1 ns a character: ~2,000 characters per token so far
    assert per_step[-1] == pytest.approx(2000 * 800, rel=0.01)
    assert per_step[99] == pytest.approx(2000 * 400, rel=0.01)
    assert per_step[0] == pytest.approx(2000 * 4, rel=0.01)
    assert stream.text == "word" * 200


def test_host_per_token_costs_about_its_time_at_any_text_length():
    """On this machine a step at 100 tokens with 50 µs per token so far spends about 5 ms
    scanning, whether the text is short or long (the scan's cost per call is counted: a short
    text is not scanned thousands of times too often). Only a floor is asserted: a loaded
    machine makes the same work take longer."""
    for chars_per_token in (1, 40):
        stream = faults.HostFaults(host_per_token_us=50.0).step_work(
            lambda ids, c=chars_per_token: "x" * (c * len(ids))
        )
        stream.add(list(range(99)))
        t0 = time.perf_counter()
        stream.add([1])
        assert time.perf_counter() - t0 >= 0.5 * 100 * 50e-6


@pytest.mark.parametrize(
    ("args", "words"),
    [(["--fault", "no-such"], "no such fault"),
     (["--fault", "host-per-token=x"], "µs per token"),
     (["--fault", "spec-no-accept"], "use --backend engine"),
     (["--backend", "engine", "--fault", "graph-off-above"], "graph-off-above=N needs a batch size"),
     (["--backend", "engine", "--fault", "graph-off-above=0"], "a batch size >= 1, got '0'"),
     (["--backend", "engine", "--fault", "draft-budget=two"], "drafted tokens per step >= 1"),
     (["--backend", "engine", "--fault", "prompt-only-ngram=3"], "takes no value")],
)  # fmt: skip
def test_bad_fault_flags_are_one_line_usage_errors(args, words):
    from typer.testing import CliRunner

    from specscope.cli import app

    res = CliRunner().invoke(app, ["serve", *args])
    assert res.exit_code == 2 and words in res.stderr, res.stderr
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_a_server_with_host_faults_streams_the_same_text(twin_server):
    """Faults change the cost of a step, never what is sent."""
    import json
    import urllib.request

    def completion(url: str) -> str:
        body = {"model": "m", "prompt": "the draft", "max_tokens": 40, "stream": True, "seed": 3}
        req = urllib.request.Request(
            url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            events = [
                line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")
            ]
        return "".join(json.loads(e)["choices"][0]["text"] for e in events if e != "[DONE]")

    clean = completion(twin_server("healthy", time_scale=0.02).url)
    faulty = twin_server(
        "healthy", time_scale=0.02, faults=faults.HostFaults(detok_full=True, host_per_token_us=5)
    )
    assert completion(faulty.url) == clean and clean


def test_a_host_fault_runs_on_the_step_path_between_one_step_and_the_next():
    """The fault's work for step n runs on the step thread after step n and before step n + 1
    (the next step waits for it), not on the event loop beside the steps."""
    import threading
    from collections import deque

    from specscope.backend import BatchStep, SamplingParams, StepOutput
    from specscope.serve.scheduler import RequestState
    from specscope.serve.step_thread import StepThread

    order: list[tuple[str, int, str]] = []
    done = threading.Event()

    class Backend:
        steps = 0

        def prefill_locked(self, request_id, prompt_ids, params) -> None:
            pass

        def step_locked(self, request_ids) -> BatchStep:
            self.steps += 1
            order.append(("step", self.steps, threading.current_thread().name))
            last = self.steps == 3
            outs = [StepOutput(rid, [self.steps], finished=last) for rid in request_ids]
            return BatchStep(outs, step_s=0.0)

        def release(self, request_id) -> None:
            pass

    class Work:
        def add(self, ids, final=False) -> str:
            order.append(("work", ids[0], threading.current_thread().name))
            return ""

    def report(r) -> None:
        if r.batch and r.batch.outputs[0].finished:
            done.set()

    state = RequestState("r1", [1, 2], SamplingParams(max_tokens=3))
    state.step_work = Work()
    thread = StepThread(Backend(), deque([state]), 4, report, lambda fn, r: fn(r), step_work=True)
    thread.start()
    assert done.wait(10)
    thread.stop()
    assert [(kind, n) for kind, n, _ in order] == [
        ("step", 1), ("work", 1), ("step", 2), ("work", 2), ("step", 3), ("work", 3)
    ]  # fmt: skip
    assert {name for *_, name in order} == {"specscope-step"}
