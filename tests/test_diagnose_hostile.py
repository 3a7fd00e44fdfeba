"""`diagnose` against servers that never answer, streams that never end, and Ctrl-C mid-run:
the probe's timeout flags bound every request, and an interrupt leaves every finished request
and the one in flight (recorded `cancelled`) on disk. Also the probe's input options
(--prompt-file, --tokenizer, --model, --same-prompt) against a server with no tokenize endpoint."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from specscope.trace import load_run
from support.cli import start_cli
from support.loopback import LoopbackServer, models_handler, sse, tokenize_handler

WAIT_S = 90
QUICK = ["--quick", "--prompt-tokens", "16", "--max-tokens", "40"]


def _specscope(args: list[str], home: Path) -> subprocess.Popen:
    """The real CLI in its own process group (Ctrl-C goes to the group, as a terminal sends it)."""
    return start_cli(args, home, new_session=True)


def _finish(proc: subprocess.Popen) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)


def _server(completions: Any, *, tokenize: bool = True) -> web.Application:
    a = web.Application()
    a.router.add_get("/v1/models", models_handler("vllm"))
    a.router.add_get("/version", lambda _: web.json_response({"version": "0.28.0"}))
    if tokenize:
        a.router.add_post("/tokenize", tokenize_handler)
    a.router.add_post("/v1/completions", completions)
    return a


def _chunk(ct: int, finish: str | None = None) -> bytes:
    return sse(
        {
            "id": "r",
            "choices": [{"index": 0, "text": " w", "finish_reason": finish}],
            "usage": {"prompt_tokens": 16, "completion_tokens": ct},
        }
    )


def _streaming(step_s: float, *, short_until: int = 0) -> Any:
    """max_tokens tokens, one per `step_s`; requests of at most `short_until` tokens at once."""

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n = int(body.get("max_tokens", 16))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(1, n + 1):
            await asyncio.sleep(0.001 if n <= short_until else step_s)
            await resp.write(_chunk(i, "length" if i == n else None))
        await resp.write(sse(b"[DONE]"))
        return resp

    return completions


def test_a_silent_server_is_bounded_by_the_timeout_flags(tmp_path):
    async def silent(request: web.Request) -> web.StreamResponse:
        await request.read()
        await asyncio.sleep(600)
        return web.Response(text="late")

    with LoopbackServer(_server(silent)) as srv:
        t0 = time.monotonic()
        proc = _specscope(
            [
                "diagnose",
                srv.url,
                "--out",
                str(tmp_path / "run"),
                *QUICK,
                "--timeout-first-byte",
                "1",
                "--timeout-total",
                "3",
            ],
            tmp_path,
        )
        _, err = _finish(proc)
    assert time.monotonic() - t0 < 60
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err
    run = load_run(tmp_path / "run")
    assert run.requests and all(r.error.kind == "timeout_first_byte" for r in run.requests)
    assert len(run.requests) == 1  # a request that ran out of time is not tried again
    assert run.info.args["timeouts"]["first_byte"] == 1.0


def test_an_endless_stream_is_bounded_by_the_total_timeout(tmp_path):
    async def endless(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(20_000):  # keep-alive comments: bytes forever, never a token or an end
            await resp.write(b": keep-alive\n\n")
            await asyncio.sleep(0.02)
        return resp

    with LoopbackServer(_server(endless)) as srv:
        t0 = time.monotonic()
        proc = _specscope(
            ["diagnose", srv.url, "--out", str(tmp_path / "run"), *QUICK, "--timeout-total", "2"],
            tmp_path,
        )
        _, err = _finish(proc)
    assert time.monotonic() - t0 < 60
    assert proc.returncode == 1 and "Traceback" not in err, err[-3000:]
    (req,) = load_run(tmp_path / "run").requests
    assert req.error is not None and req.error.kind == "timeout_total"


def test_ctrl_c_during_the_full_generation_keeps_the_request_in_flight(tmp_path):
    run_dir = tmp_path / "run"
    with LoopbackServer(_server(_streaming(0.05, short_until=32))) as srv:
        proc = _specscope(
            [
                "diagnose",
                srv.url,
                "--out",
                str(run_dir),
                "--quick",
                "--prompt-tokens",
                "16",
                "--max-tokens",
                "2000",
            ],
            tmp_path,
        )
        path = run_dir / "requests.jsonl"
        deadline = time.monotonic() + WAIT_S
        while not (path.is_file() and path.read_text().count("\n") >= 1):  # calibration done
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        # The full generation is streaming (its prompt, like every shape of the plan, is
        # fitted before the plan sends anything, so wait for it to be sent).
        while len(srv.posts("/v1/completions")) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        time.sleep(1.5)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = _finish(proc)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    run = load_run(run_dir)
    assert run.info.status == "partial"
    calib, full = run.requests
    assert calib.error is None
    assert full.spec.tag == "full_generation" and full.error is not None
    assert full.error.kind == "cancelled" and full.tokens_received >= 5  # what it had received
    analysis = json.loads((run_dir / "analysis.json").read_text())
    assert analysis["requests"] == 2
    # what it streamed is the headline (not the 32-token calibration), and a partial run never
    # reads acceptance as steady
    assert analysis["decode_tps"] is not None
    assert any("cut short by Ctrl-C" in n for n in analysis["notes"]), analysis["notes"]
    assert "steady" not in out and "steady" not in json.dumps(analysis["verdict"])


def test_prompt_file_local_tokenizer_model_and_same_prompt(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    prose = (
        "The river ran past the old mill where the miller kept his stones dry and his "
        "accounts in a green ledger that nobody else was allowed to read. "
    ) * 4
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(sorted(set(prose.split())))}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "prompt.txt").write_text(prose)
    with LoopbackServer(_server(_streaming(0.002), tokenize=False)) as srv:
        proc = _specscope(
            [
                "diagnose",
                srv.url,
                "--out",
                str(tmp_path / "run"),
                "--quick",
                "--json",
                "--max-tokens",
                "24",
                "--prompt-file",
                str(tmp_path / "prompt.txt"),
                "--tokenizer",
                str(tmp_path / "tokenizer.json"),
                "--model",
                "my-model",
                "--same-prompt",
            ],
            tmp_path,
        )
        out, err = _finish(proc)
        bodies = srv.posts("/v1/completions")
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err
    json.loads(out)
    run = load_run(tmp_path / "run")
    assert run.info.args["prompt_tokens"] == len(prose.split())  # the file's own length
    assert bodies and all(b["model"] == "my-model" for b in bodies)
    full = run.by_tag("full_generation")[0]
    assert full.spec.prompt == prose.strip() or prose.startswith(str(full.spec.prompt).strip())
    # --same-prompt: every prompt starts where the file starts (one prefix for the cache).
    starts = {str(r.spec.prompt).split()[0] for r in run.requests}
    assert starts == {"The"}
