"""Start llama.cpp's own HTTP server (through xllamacpp) as a real speculative-decoding peer.

Three modes, one target (SmolLM2-135M F16, see `specscope.peers.models`):
- `none`:  plain decoding, the baseline (every verify step commits exactly one token);
- `draft`: `draft-simple` speculation with the original Q4_1 file as draft model, draft n max 8;
- `ngram`: `ngram-simple` speculation (prompt/history lookup, no draft model).
Metrics are on (`/metrics` exports `llamacpp:spec_decode_*` counters), one slot, two threads
(`--threads`).

xllamacpp runs the server inside the Python process that creates `xllamacpp.Server` and stops it
in the object's destructor. `LlamaCppServer` nevertheless runs it in a child process
(`python -m specscope.peers.llamacpp --mode M`): a child can always be terminated (even if a
decode hangs), it keeps llama.cpp's log in its own file (which `specscope logs` can read), and a
crash in native code cannot take the caller down.

    python -m specscope.peers.llamacpp --mode draft      # prints the URL, serves until Ctrl-C
    python -m specscope.peers.llamacpp --mode draft -- specscope diagnose {url} --quick --logs {log}
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Literal

from specscope.peers.launcher import (
    PeerServer,
    PeerServerError,
    add_command_arguments,
    get_status,
    peer_parser,
    run_command,
    split_command,
)
from specscope.peers.models import DEFAULT_OUT, PeerModelError, PeerModels, peer_models

Mode = Literal["none", "draft", "ngram"]
MODES: tuple[Mode, ...] = ("none", "draft", "ngram")
DRAFT_N_MAX = 8
# Two threads suit an idle 2-core machine. On a busy one llama.cpp's spin barriers between its
# threads collapse throughput (measured at load 7.5: 0.6 tok/s with 2 threads, 10-13 with 1), so
# tests pass threads=1.
THREADS = 2
N_CTX = 8192  # SmolLM2's training context; KV for both models stays under 0.5 GB
# ngram-simple defaults (lookup 12, draft 48) rarely match in short runs; prompt-lookup-like sizes
# make it draft on repetitive text, and the draft cap equals the draft-model mode's for comparison.
NGRAM_LOOKUP_N = 4
NGRAM_DRAFT_M = DRAFT_N_MAX
URL_LINE_PREFIX = "specscope-peer-url: "
SHUTDOWN_GRACE_S = 10.0


def build_params(
    mode: Mode,
    models: PeerModels,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    threads: int = THREADS,
):
    """The xllamacpp equivalent of
    `llama-server -m T [-md D --spec-type draft-simple --spec-draft-n-max 8 | --spec-type
    ngram-simple] --metrics -np 1 -t THREADS --host 127.0.0.1 --port P`.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = str(models.target)
    params.hostnames = [host]
    params.port = port  # 0: the OS picks a free port; Server.listening_address tells which
    params.endpoint_metrics = True  # --metrics
    params.n_parallel = 1
    params.n_ctx = N_CTX
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    spec_type = xlc.common_speculative_type
    if mode == "draft":
        params.speculative.draft.mparams.path = str(models.draft)
        params.speculative.draft.n_max = DRAFT_N_MAX
        params.speculative.draft.cpuparams.n_threads = threads
        params.speculative.draft.cpuparams_batch.n_threads = threads
        # A draft model alone does not turn speculation on: the type must be set explicitly.
        params.speculative.types = [spec_type.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
    elif mode == "ngram":
        params.speculative.ngram_simple.size_n = NGRAM_LOOKUP_N
        params.speculative.ngram_simple.size_m = NGRAM_DRAFT_M
        params.speculative.types = [spec_type.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
    elif mode == "none":
        params.speculative.types = [spec_type.COMMON_SPECULATIVE_TYPE_NONE]
    else:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    return params


def serve_forever(mode: Mode, models: PeerModels, *, host: str, port: int, threads: int) -> None:
    """Run the server in this process until SIGINT/SIGTERM; print the URL once it listens."""
    import xllamacpp as xlc

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server = xlc.Server(build_params(mode, models, host=host, port=port, threads=threads))
    except RuntimeError as exc:
        print(f"error: llama.cpp server did not start: {exc}", file=sys.stderr, flush=True)
        # A failed init can leave llama.cpp's native threads running, which would keep the
        # interpreter alive forever; leave at once instead.
        os._exit(1)
    url = server.listening_address
    print(f"{URL_LINE_PREFIX}{url}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        # ~Server hangs when it runs before llama.cpp's main loop has started (a stop right after
        # start): wait until the server answers, and never let shutdown take longer than a bound.
        deadline = time.monotonic() + SHUTDOWN_GRACE_S
        while get_status(f"{url}/health", timeout_s=1.0) != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        watchdog = threading.Timer(SHUTDOWN_GRACE_S, os._exit, args=(0,))
        watchdog.daemon = True
        watchdog.start()
        del server  # ~Server stops the HTTP loop and frees both models
        watchdog.cancel()


class LlamaCppServer(PeerServer):
    """llama.cpp's server in a child process (see `PeerServer`), healthy on entry, gone on exit.

    The child prints its listening address on stdout once the port is bound (port 0: no race);
    its stderr is llama.cpp's log.
    """

    name = "llama.cpp"
    ready_path = "/health"
    log_file_name = "llama-server.log"

    def __init__(
        self,
        mode: Mode,
        *,
        models_dir: Path = DEFAULT_OUT,
        log_path: Path | None = None,
        start_timeout_s: float = 120.0,
        threads: int = THREADS,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        super().__init__(label=mode, log_path=log_path, start_timeout_s=start_timeout_s)
        self.mode = mode
        self.models_dir = Path(models_dir)
        self.threads = threads

    def _prepare(self) -> None:
        peer_models(self.models_dir)  # fail early, in this process, with the one-line message

    def _spawn(self, log: IO[str]) -> subprocess.Popen[str]:
        argv = [
            sys.executable, "-m", "specscope.peers.llamacpp",
            "--mode", self.mode, "--port", "0", "--models", str(self.models_dir),
            "--threads", str(self.threads),
        ]  # fmt: skip
        return self._popen(argv, log, stdout_pipe=True)

    def _discover_url(self, deadline: float) -> str:
        """Read the address line the child prints once it listens."""
        assert self._proc is not None and self._proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout, selectors.EVENT_READ)
            while (left := deadline - time.monotonic()) > 0:
                if not sel.select(timeout=min(left, 1.0)):
                    if self._proc.poll() is not None:
                        break
                    continue
                line = self._proc.stdout.readline()
                if not line:  # EOF: the child is exiting; reap it so that its status is known
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self._proc.wait(timeout=10)
                    break
                if line.startswith(URL_LINE_PREFIX):
                    return line[len(URL_LINE_PREFIX) :].strip()
        raise PeerServerError(self._startup_failure("did not report its address"))


def run_with_server(
    mode: Mode,
    command: list[str],
    *,
    models_dir: Path,
    threads: int,
    log_path: Path | None,
    timeout_s: float,
) -> int:
    """Start the server, run `command` (no shell) with `{url}` / `{log}` filled in, stop it.

    This is the one-liner for docs: the server lives exactly as long as the command.
    """
    with LlamaCppServer(mode, models_dir=models_dir, log_path=log_path, threads=threads) as srv:
        return run_command(srv, command, timeout_s=timeout_s)


def main(argv: list[str] | None = None) -> int:
    parser = peer_parser(
        "python -m specscope.peers.llamacpp", "SmolLM2 with llama.cpp's server (xllamacpp)"
    )
    parser.add_argument("--mode", choices=MODES, default="draft", help="speculation mode")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default loopback)")
    parser.add_argument("--port", type=int, default=8080, help="0 = any free port")
    parser.add_argument("--models", type=Path, default=DEFAULT_OUT, help="peer-models folder")
    parser.add_argument("--threads", type=int, default=THREADS, help="decode threads (-t)")
    add_command_arguments(parser, "with a command: keep the log here")
    args = parser.parse_args(argv)
    command = split_command(args.command)
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    try:
        models = peer_models(args.models)
        import xllamacpp  # noqa: F401  (a clear message beats an ImportError traceback)
    except PeerModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ImportError:
        print("error: xllamacpp is not installed; run: pip install -e '.[peer]'", file=sys.stderr)
        return 2
    if command:
        try:
            return run_with_server(
                args.mode, command, models_dir=args.models, threads=args.threads,
                log_path=args.log, timeout_s=args.timeout,
            )  # fmt: skip
        except PeerServerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    if os.isatty(sys.stdout.fileno()):
        print(f"serving {models.target.name} in mode {args.mode!r}; Ctrl-C stops", file=sys.stderr)
    serve_forever(args.mode, models, host=args.host, port=args.port, threads=args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
