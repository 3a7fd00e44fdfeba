"""The engine in a process of its own behind `serve` (serve/engine_process.py): it serves, its
start failure is one line, its death fails the running requests with a 500 and frees them, and
no engine process outlives the server.

The engine here is a tiny random Llama (token ids in, ids out: its tokenizer is empty), built in
the child by a factory of this module, so that a test costs a process start, not a model load.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from specscope.serve.engine_process import EngineProcess, EngineStartError
from specscope.serve.options import ServeOptions
from specscope.serve.runner import run_server
from support.cli import announced_url, start_cli

pytestmark = pytest.mark.engine
pytest.importorskip("torch")


def tiny_engine(step_sleep_s: float = 0.0) -> Any:
    """A tiny random engine (runs in the child); `step_sleep_s` slows each step, so that a
    request is surely running when the test kills the child."""
    import torch

    from specscope.engine.factory import assemble
    from specscope.engine.kv_cache import KVCache
    from specscope.engine.loader import TINY_CONFIG, random_model
    from specscope.engine.options import EngineOptions

    lm = random_model(TINY_CONFIG, device="cpu", dtype=torch.float32, seed=0)
    kv = KVCache.for_model(lm.config, pool_tokens=1024, page_size=16)
    backend = assemble(lm, kv, EngineOptions(max_batch=4))
    if step_sleep_s:
        step = backend.step_sync

        def slow_step(ids: list[str]) -> Any:
            time.sleep(step_sleep_s)
            return step(ids)

        backend.step_sync = slow_step  # type: ignore[method-assign]
    return backend


def _post(url: str, body: dict[str, Any], timeout: float = 60) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _generate(url: str, max_new: int) -> tuple[int, dict[str, Any]]:
    body = {
        "input_ids": [3, 5, 7, 11, 13],
        "sampling_params": {"max_new_tokens": max_new, "temperature": 0.0, "ignore_eos": True},
    }
    return _post(f"{url}/generate", body)


def _gone(pid: int) -> bool:
    """No process with this id (a zombie counts as there: its parent has not reaped it)."""
    return not Path(f"/proc/{pid}").exists()


def test_the_engine_process_serves_and_is_gone_after_stop():
    engine = EngineProcess(tiny_engine)
    pid = engine.pid
    assert pid != os.getpid() and not _gone(pid)
    handle = run_server(engine, ServeOptions(log_to_stderr=False, max_batch=4))
    try:
        status, out = _generate(handle.url, 9)
        assert status == 200, out
        assert len(out["output_ids"]) == 9 == out["meta_info"]["completion_tokens"]
        with urllib.request.urlopen(f"{handle.url}/get_server_info", timeout=10) as resp:
            info = json.loads(resp.read())
        assert info["backend"]["engine_pid"] == pid
    finally:
        handle.stop()
    assert _gone(pid), "the engine process outlived the server"
    engine.stop()  # idempotent


def test_a_start_failure_is_one_line_and_leaves_no_process():
    from specscope.engine.factory import build_backend

    with pytest.raises(EngineStartError) as err:
        EngineProcess(functools.partial(build_backend, model="/nonexistent/missing.gguf"))
    line = str(err.value)
    assert "missing.gguf" in line and "\n" not in line, line
    with pytest.raises(EngineStartError, match=r"exited before it was ready \(code 3\)"):
        EngineProcess(functools.partial(os._exit, 3))


def test_the_engine_process_dying_fails_its_requests_with_500(tmp_path):
    engine = EngineProcess(functools.partial(tiny_engine, 0.05))
    log = tmp_path / "server.log"
    handle = run_server(engine, ServeOptions(log_to_stderr=False, log_file=log, max_batch=4))
    sched = handle.app.state.ctx.scheduler
    try:
        answers: list[tuple[int, dict[str, Any]]] = []
        client = threading.Thread(target=lambda: answers.append(_generate(handle.url, 500)))
        client.start()
        deadline = time.monotonic() + 30
        while not sched.running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sched.running, "the request never ran"
        os.kill(engine.pid, signal.SIGKILL)
        client.join(30)
        status, body = answers[0]
        assert status == 500, body
        assert sched.running == {} and sched.queued == 0  # freed
        assert "engine process" in log.read_text() and "killed by signal 9" in log.read_text()
        status, body = _generate(handle.url, 4)  # a new request fails at once
        assert status == 500, body
    finally:
        handle.stop()
    assert _gone(engine.pid)


def test_a_host_fault_runs_in_the_engine_process_on_the_step_path():
    """`--fault host-per-token` is output processing in the step loop: with the loop in the
    engine's process it runs there, after each step and before the next (the steps' post time
    in /metrics grows with it), not in the HTTP process."""
    from specscope.serve.faults import HostFaults

    def post_seconds(faults: HostFaults) -> float:
        engine = EngineProcess(tiny_engine)
        opts = ServeOptions(log_to_stderr=False, max_batch=4, faults=faults)
        handle = run_server(engine, opts)
        try:
            assert _generate(handle.url, 40)[0] == 200
            with urllib.request.urlopen(f"{handle.url}/metrics", timeout=10) as resp:
                text = resp.read().decode()
        finally:
            handle.stop()
        line = next(
            x for x in text.splitlines() if x.startswith("specscope:step_post_seconds_total")
        )
        return float(line.split()[-1])

    # 40 tokens at 500 µs per token so far and step: ~0.4 s of scans over the request
    assert post_seconds(HostFaults(host_per_token_us=500)) > 0.2
    assert post_seconds(HostFaults()) < 0.1


def test_ctrl_c_on_specscope_serve_leaves_no_engine_process(tmp_path):
    """`specscope serve --backend engine` as a terminal runs it: Ctrl-C to its process group
    (the child ignores it), the server stops its engine process and exits."""
    proc = start_cli(["serve", "--backend", "engine", "--port", "0"], tmp_path, new_session=True)
    try:
        url = announced_url(proc, 120)
        with urllib.request.urlopen(f"{url}/get_server_info", timeout=30) as resp:
            pid = json.loads(resp.read())["backend"]["engine_pid"]
        assert not _gone(pid)
        status, out = _post(f"{url}/v1/completions", {"prompt": "Hello", "max_tokens": 4})
        assert status == 200 and out["usage"]["completion_tokens"] == 4
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
        proc.stderr.close()
        proc.stdout.close()
    assert _gone(pid), "the engine process outlived `specscope serve`"
