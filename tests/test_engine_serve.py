"""`specscope serve --backend engine`, end to end: the engine (real SmolLM2 weights) behind the
SERVE layer's real HTTP server on 127.0.0.1, answering the `openai` client."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from specscope.cli import app
from specscope.engine.factory import build_backend
from specscope.serve.options import ServeOptions
from specscope.serve.runner import run_server

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def engine_url():
    # The same call `specscope serve --backend engine --page-size 1 --kv-alloc scattered` makes.
    backend = build_backend(
        model="smollm2",
        page_size=1,
        kv_alloc="scattered",
        max_batch=4,
        kv_pool_tokens=2048,
        device="cpu",
    )
    handle = run_server(backend, ServeOptions(log_to_stderr=False, max_batch=4), "127.0.0.1", 0)
    try:
        yield handle.url
    finally:
        handle.stop()
        assert backend.kv.free_pages == backend.kv.num_pages  # every request gave its pages back


def test_openai_chat_and_streamed_completion(engine_url):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(
        base_url=f"{engine_url}/v1", api_key="unused", timeout=120, max_retries=0
    )
    chat = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=8,
        temperature=0,
    )
    assert "Paris" in chat.choices[0].message.content
    assert 0 < chat.usage.completion_tokens <= 8
    pieces = []
    stream = client.completions.create(
        model="smollm2",
        prompt="def add(a, b):\n    return",
        max_tokens=5,
        temperature=0,
        stream=True,
    )
    for event in stream:
        pieces += [c.text for c in event.choices]
    assert "a + b" in "".join(pieces)


def test_cli_refuses_a_missing_model_in_one_line(tmp_path):
    # In this process: an exit code and a message need no interpreter start-up of their own.
    res = CliRunner().invoke(
        app,
        ["serve", "--backend", "engine", "--model", str(tmp_path / "missing.gguf"), "--port", "0"],
    )
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 2
    assert "missing.gguf" in res.stderr and "Traceback" not in res.stderr
