"""Our own server against hostile clients: a body larger than the limit is refused before it is
read, a client that promises more body than it sends and leaves leaves no traceback in the
server's log, and a large body is parsed and tokenized off the event loop (other requests are
answered while it is processed)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from specscope.serve.validation import MAX_BODY_BYTES
from support.cli import announced_url


@pytest.fixture
def served() -> Iterator[tuple[str, list[str]]]:
    """`specscope serve --port 0` (the twin) as a process; yields (url, its stderr lines so far)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "specscope.cli", "serve", "--port", "0", "--scenario", "healthy"],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    url = announced_url(proc, 60, lines)
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        yield url, lines
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        reader.join(5)


def _post(url: str, body: bytes, timeout: float = 60) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _raw(url: str, head: bytes, body_pieces: list[bytes]) -> bytes:
    """Send a request by hand (every byte of it, then half-close) and read the answer."""
    with socket.create_connection(_host_port(url), timeout=30) as s:
        s.sendall(head)
        for piece in body_pieces:
            s.sendall(piece)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_a_body_over_the_limit_is_refused_before_it_is_read(served):
    url, _ = served
    # No Content-Length (chunked): counted while read, refused once past the limit.
    piece = b" " * (1 << 20)
    n = MAX_BODY_BYTES // len(piece) + 1
    chunked = [b"%x\r\n%s\r\n" % (len(piece), piece)] * n + [b"0\r\n\r\n"]
    answer = _raw(
        url,
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
        b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        chunked,
    )
    assert b" 413 " in answer.split(b"\r\n", 1)[0], answer[:300]
    assert b"limit" in answer
    # Declared too large: refused on the header alone, the bytes are never sent.
    with socket.create_connection(_host_port(url), timeout=10) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            b"\r\nContent-Length: 20000000\r\n\r\n{"
        )
        head = s.recv(4096)
    assert b" 413 " in head.split(b"\r\n", 1)[0]


def test_a_client_leaving_mid_body_leaves_no_traceback(served):
    url, lines = served
    for _ in range(3):
        with socket.create_connection(_host_port(url), timeout=10) as s:
            s.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                b'application/json\r\nContent-Length: 100000\r\n\r\n{"prompt": "abc'
            )
            time.sleep(0.2)
    time.sleep(0.5)
    status, _ = _post(
        url + "/v1/completions", json.dumps({"prompt": "hello there", "max_tokens": 2}).encode()
    )
    assert status == 200  # the server is fine
    log = "".join(lines)
    assert "Traceback" not in log and "ClientDisconnect" not in log, log[-3000:]


def test_a_large_body_does_not_stall_other_requests(served):
    url, lines = served
    prompt = "the quick brown fox jumps over the lazy dog " * 160_000  # ~7 MB, 1.4M tokens
    body = json.dumps({"prompt": prompt}).encode()
    assert len(body) < MAX_BODY_BYTES
    done: dict[str, float] = {}

    def big() -> None:
        done["sent"] = time.monotonic()
        status, _ = _post(url + "/tokenize", body, timeout=120)
        done["big"] = time.monotonic()
        done["status"] = status

    t = threading.Thread(target=big)
    t.start()
    answered: list[float] = []  # small requests sent one after another while the big one runs
    while t.is_alive() and len(answered) < 50:
        with urllib.request.urlopen(url + "/v1/models", timeout=60) as r:
            assert r.status == 200
        answered.append(time.monotonic())
        time.sleep(0.05)
    t.join(120)
    assert done.get("status") == 200
    # Several answered before the big one finished: the loop kept serving while it was parsed
    # and tokenized (with the work on the loop, the first small request waits for all of it).
    assert sum(a < done["big"] for a in answered) >= 3, (answered, done)
    assert "Traceback" not in "".join(lines)
