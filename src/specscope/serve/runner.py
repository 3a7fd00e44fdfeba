"""Run a server in a background thread on loopback (tests, `specscope diagnose` without URL),
or in the foreground (`specscope serve`).

    handle = run_server(backend)
    ... handle.url ...   # e.g. http://127.0.0.1:41234
    handle.stop()

The socket is bound before the thread starts (port 0 = a free port picked by the OS), so the URL
is known and connectable as soon as the function returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI

from specscope.backend import Backend
from specscope.serve.app import create_app
from specscope.serve.options import ServeOptions

START_TIMEOUT_S = 20.0


@dataclass
class ServerHandle:
    url: str
    host: str
    port: int
    app: FastAPI
    backend: Backend
    _server: uvicorn.Server
    _thread: threading.Thread

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and wait for the thread (in-flight streams end without [DONE])."""
        loop = getattr(self.app.state, "loop", None)
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.app.state.ctx.scheduler.abort_all)
            time.sleep(0.05)
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _config(app: FastAPI, host: str, port: int) -> uvicorn.Config:
    # Access logs off: the server's own SGLang-style lines are what clients parse.
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=1,
    )


def run_server(
    backend: Backend, options: ServeOptions | None = None, host: str = "127.0.0.1", port: int = 0
) -> ServerHandle:
    """Serve `backend` from a daemon thread; returns once the server accepts connections."""
    app = create_app(backend, options)
    sock = _bind(host, port)
    real_port = sock.getsockname()[1]
    server = uvicorn.Server(_config(app, host, real_port))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # not main thread

    def target() -> None:
        asyncio.run(server.serve(sockets=[sock]))
        sock.close()

    thread = threading.Thread(target=target, name=f"specscope-serve-{real_port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"server on {host}:{real_port} did not start")
        time.sleep(0.01)
    shown = f"[{host}]" if ":" in host else host
    return ServerHandle(
        f"http://{shown}:{real_port}", host, real_port, app, backend, server, thread
    )


def serve_forever(
    backend: Backend,
    options: ServeOptions | None = None,
    host: str = "127.0.0.1",
    port: int = 30000,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Foreground server for the CLI; returns on Ctrl-C / SIGTERM. `announce` gets the URL once
    the socket is bound (with port 0, the port the OS picked)."""
    sock = _bind(host, port)  # OSError here (port taken) is the caller's clear message
    real_port = sock.getsockname()[1]
    app = create_app(backend, options)
    if announce is not None:
        shown = f"[{host}]" if ":" in host else host
        announce(f"http://{shown}:{real_port}")
    uvicorn.Server(_config(app, host, real_port)).run(sockets=[sock])
