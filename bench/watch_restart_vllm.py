"""The watch against the vLLM CPU peer restarted without speculation (#40's done-when: "an alert
`speculation_off` within 60 s of the restarted server answering").

Serves the peer with n-gram speculation on a free loopback port (`specscope.peers.vllm`'s
VllmServer, `--enforce-eager`, one vLLM at a time), watches it with `specscope watch URL
--metrics-url URL/metrics --json` as a child process (a canary every 10 s, short canaries so
that one ends within a few seconds on a CPU), reads its event lines as they come, and after the
warm-up and a few watched windows stops the server and serves it again on the same port with
`--spec none`. The restarted server "answers" when its /v1/models returns 200 (VllmServer's
readiness poll, every 0.3 s); the delay is the `speculation_off` alert's time minus that. The
watch is then stopped with Ctrl-C (its summary event), the server stopped (its whole process
group), both also on an exception or Ctrl-C here.

    PYTHONPATH=src .venv/bin/python bench/watch_restart_vllm.py [--out events.json]

Exit 0 when `speculation_off` came within --deadline (60 s) of the restarted server answering,
1 when it did not (or a server did not start). Needs `make peer-vllm` (.cache/peer-vllm). Takes
~5-8 minutes on 2 cores (two vLLM start-ups, a 60 s warm-up, the wait).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from specscope.peers.launcher import PeerServerError, free_port
from specscope.peers.vllm import VllmServer
from specscope.peers.vllm_install import VllmInstallError

REPO = Path(__file__).resolve().parents[1]
PEER_ROOT = REPO / ".cache" / "peer-vllm"
SPECSCOPE = (sys.executable, "-m", "specscope.cli")
WATCH_STOP_S = 30.0  # the watch's Ctrl-C path (summary) before it is killed
Event = dict[str, Any]


class EventReader:
    """The watch's standard output read on a thread, each JSON line kept with its arrival time,
    so that the main thread can start and stop servers while the events keep coming."""

    def __init__(self, stream: IO[str]) -> None:
        self.events: list[Event] = []
        self.unparsed: list[str] = []
        self._cv = threading.Condition()
        self._done = False
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._cv:
                try:
                    event = json.loads(line)
                    event["_arrived"] = time.time()
                    self.events.append(event)
                except json.JSONDecodeError:
                    self.unparsed.append(line.rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self._done = True
            self._cv.notify_all()

    def wait_for(
        self, match: Callable[[list[Event]], Event | None], timeout_s: float
    ) -> Event | None:
        """The event `match` picks from the events so far, waiting up to timeout_s for it
        (None: not within the time, or the watch's output ended)."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while True:
                found = match(self.events)
                if found is not None or self._done:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cv.wait(min(left, 1.0))

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)


def start_server(
    spec: str, port: int, args: argparse.Namespace, log: Path
) -> tuple[VllmServer, float]:
    """A vLLM peer on `port`, ready (/v1/models 200): the server and the unix time it answered.
    A server that fails to start is stopped before the error goes up (no process left)."""
    server = VllmServer(
        spec, root=args.root, enforce_eager=True, log_path=log, port=port,
        start_timeout_s=args.start_timeout, cpu_bind=args.cpu_bind,
    )  # fmt: skip
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    answered = time.time()
    print(f"# vLLM --spec {spec} answering at {server.url} after {server.startup_s:.1f} s "
          f"(log {log})", file=sys.stderr, flush=True)  # fmt: skip
    return server, answered


def start_watch(url: str, args: argparse.Namespace, stderr: IO[str]) -> subprocess.Popen[str]:
    """`specscope watch` in its own process group (stopped as a group), event lines on a pipe.
    Its --duration bounds it even if this script were killed without stopping it."""
    argv = [
        *SPECSCOPE, "watch", url, "--metrics-url", f"{url}/metrics", "--json",
        "--probe-every", str(args.probe_every), "--interval", str(args.probe_every),
        "--prompt-tokens", str(args.prompt_tokens), "--max-tokens", str(args.max_tokens),
        "--duration", str(args.watch_bound),
    ]  # fmt: skip
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True,
        start_new_session=True, cwd=REPO,
    )  # fmt: skip


def stop_watch(proc: subprocess.Popen[str]) -> int | None:
    """Ctrl-C first (the watch ends with its summary event, exit 130), then SIGKILL."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=WATCH_STOP_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=WATCH_STOP_S)
    return proc.returncode


def watched_windows(n: int) -> Callable[[list[Event]], Event | None]:
    """The n-th window after the warm-up (the detector has its baseline)."""

    def match(events: list[Event]) -> Event | None:
        watching = [
            e for e in events if e.get("event") == "window" and e.get("state") == "watching"
        ]
        return watching[n - 1] if len(watching) >= n else None

    return match


def alert_after(factor: str, t0: float) -> Callable[[list[Event]], Event | None]:
    """The first `factor` alert raised at or after t0 (unix seconds)."""

    def match(events: list[Event]) -> Event | None:
        for e in events:
            if e.get("event") == "alert" and e.get("factor") == factor and e["t"] >= t0:
                return e
        return None

    return match


def restart_check(
    args: argparse.Namespace, work: Path, marks: dict[str, Any]
) -> EventReader | None:
    """Serve n-gram, watch it past the warm-up, restart plain on the same port, wait for the
    alert. Times go into `marks` as they happen (an interrupted run still reports them)."""
    port = free_port()
    server: VllmServer | None = None
    watch: subprocess.Popen[str] | None = None
    reader: EventReader | None = None
    try:
        server, marks["ngram_answered"] = start_server("ngram", port, args, work / "vllm-ngram.log")
        with open(work / "watch.stderr", "w") as err:
            watch = start_watch(server.url, args, err)
        assert watch.stdout is not None
        reader = EventReader(watch.stdout)
        marks["watch_started"] = time.time()
        ready = reader.wait_for(watched_windows(args.windows_before), args.warmup_bound)
        if ready is None:
            marks["failure"] = (
                f"no {args.windows_before} watched windows within {args.warmup_bound:.0f} s"
            )
            return reader
        marks["restart_begun"] = time.time()
        server.stop()
        marks["stopped"] = time.time()
        server, marks["plain_answered"] = start_server("none", port, args, work / "vllm-none.log")
        alert = reader.wait_for(alert_after("speculation_off", marks["plain_answered"]), args.wait)
        marks["waited_until"] = time.time()
        if alert is None:
            marks["failure"] = f"no speculation_off alert within {args.wait:.0f} s of the answer"
        return reader
    finally:
        if watch is not None:
            marks["watch_exit"] = stop_watch(watch)
        if server is not None:
            server.stop()
        if reader is not None:
            reader.join(10.0)


def _rel(t: float | None, t0: float | None) -> float | None:
    return None if t is None or t0 is None else round(t - t0, 1)


def verdict(events: list[Event], marks: dict[str, Any], deadline_s: float) -> dict[str, Any]:
    """What the run shows: the baseline, alerts before the restart, the errors and windows
    after it, and the speculation_off alert's delay from the restarted server's answer."""
    restart, answered = marks.get("restart_begun"), marks.get("plain_answered")
    alerts = [e for e in events if e.get("event") == "alert"]
    windows = [e for e in events if e.get("event") == "window"]
    before = [w for w in windows if restart is None or w["t"] < restart]
    baseline = next((w["baseline"] for w in reversed(before) if w.get("baseline")), None)
    off = alert_after("speculation_off", answered)(events) if answered is not None else None
    delay = _rel(off["t"], answered) if off else None
    return {
        "marks": marks,
        "baseline": baseline,
        "alerts_before_restart": [a for a in alerts if restart is not None and a["t"] < restart],
        "alerts_after_restart": [a for a in alerts if restart is not None and a["t"] >= restart],
        "errors": [
            {
                "t_from_answer": _rel(e["t"], answered),
                "source": e["source"],
                "kind": e["kind"],
                "message": e["message"][:200],
            }
            for e in events
            if e.get("event") == "error"
        ],
        "windows": [
            {
                "t_from_answer": _rel(w["t"], answered),
                "state": w["state"],
                "canaries": w["canaries"],
                "canary_errors": w["canary_errors"],
                "commit_len": w["mean_commit_len"],
                "step_s": w["mean_step_s"],
                "speculation": w["speculation"],
                "server_commit_len": (w.get("server") or {}).get("commit_len"),
            }
            for w in windows
        ],
        "speculation_off": off,
        "delay_s": delay,
        "passed": delay is not None and delay <= deadline_s,
    }


def print_summary(v: dict[str, Any], deadline_s: float) -> None:
    """A compact account: the phases' times, the baseline, every window and fault around the
    restart, the alerts, and the verdict."""
    m, t0 = v["marks"], v["marks"].get("plain_answered")
    if "watch_started" in m:
        print(
            f"watch started {_rel(m['watch_started'], m['ngram_answered'])} s after the n-gram "
            f"server answered; restart begun {_rel(m.get('restart_begun'), m['watch_started'])} "
            f"s into the watch; plain server answered {_rel(t0, m.get('stopped'))} s after the stop"
        )
    b = v["baseline"]
    if b:
        print(f"baseline ({b['source']}, {b['canaries']} canaries): {b['commit_len']} tok/step, "
              f"{b['step_s'] * 1000:.1f} ms/step")  # fmt: skip
    print("windows (t from the restarted server's answer, s):")
    for w in v["windows"]:
        cl = "-" if w["commit_len"] is None else f"{w['commit_len']:.2f}"
        srv = w["server_commit_len"]
        said = "" if srv is None else f" (server: {srv:.2f} per drafted step)"
        print(f"  {w['t_from_answer']!s:>7}  {w['state']:<8} canaries {w['canaries']} "
              f"(failed {w['canary_errors']})  {cl} tok/step{said}  speculation "
              f"{w['speculation']}")  # fmt: skip
    for e in v["errors"]:
        print(f"  error {e['t_from_answer']!s:>7}  {e['source']}/{e['kind']}: {e['message'][:100]}")
    print(
        f"alerts before the restart: {[a['factor'] for a in v['alerts_before_restart']] or 0}; "
        f"after it: {[(a['factor'], _rel(a['t'], t0)) for a in v['alerts_after_restart']] or 0}"
    )
    off = v["speculation_off"]
    if off is None:
        print(f"FAIL: no speculation_off alert ({m.get('failure', 'see the events')})")
        return
    print(f"speculation_off {v['delay_s']} s after the restarted server answered (since "
          f"{_rel(off['since'], t0)} s, x{off['ratio']} {off['ci']}, cause {off['cause']}): "
          f"{'PASS' if v['passed'] else 'FAIL'} (deadline {deadline_s:.0f} s)")  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", type=Path, default=None, help="write the events and verdict here (JSON)"
    )
    ap.add_argument("--root", type=Path, default=PEER_ROOT, help="make peer-vllm's folder")
    ap.add_argument("--cpu-bind", default="auto", help="VLLM_CPU_OMP_THREADS_BIND (auto: vLLM keeps "
                    "one core for its front end, the faster choice on a busy 2-core machine)")  # fmt: skip
    ap.add_argument("--probe-every", type=float, default=10.0, help="canary period and window, s")
    ap.add_argument("--prompt-tokens", type=int, default=128, help="canary prompt length")
    ap.add_argument("--max-tokens", type=int, default=64, help="canary output length")
    ap.add_argument(
        "--windows-before", type=int, default=3, help="watched windows before the restart"
    )
    ap.add_argument("--warmup-bound", type=float, default=300.0, help="limit for the warm-up, s")
    ap.add_argument("--wait", type=float, default=120.0, help="how long to wait for the alert, s")
    ap.add_argument(
        "--deadline", type=float, default=60.0, help="the check's bound on the delay, s"
    )
    ap.add_argument(
        "--start-timeout", type=float, default=300.0, help="each vLLM start-up limit, s"
    )
    ap.add_argument("--work", type=Path, default=None, help="server logs and the watch's stderr")
    args = ap.parse_args(argv)
    args.watch_bound = args.warmup_bound + args.start_timeout + args.wait + 120.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="watch_restart_vllm-"))
    work.mkdir(parents=True, exist_ok=True)
    marks: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "work": str(work)}
    print(f"# logs under {work}", file=sys.stderr, flush=True)
    reader = None
    try:
        reader = restart_check(args, work, marks)
    except (PeerServerError, VllmInstallError) as exc:
        marks["failure"] = str(exc)
    except KeyboardInterrupt:
        marks["failure"] = "interrupted"
    events = [] if reader is None else list(reader.events)
    v = verdict(events, marks, args.deadline)
    print_summary(v, args.deadline)
    if args.out is not None:
        args.out.write_text(json.dumps({**v, "events": events}, indent=1) + "\n")
    return 0 if v["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
