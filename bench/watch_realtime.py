"""The watch against the switching twin in real time, N runs one after the other (#40's
done-when, "by hand"): each run serves `specscope serve --backend twin --scenario healthy
--switch-to seed-regression --switch-after 90` on a free loopback port, watches it with
`specscope watch URL --metrics-url URL/metrics --duration 180 --json` (a canary every 10 s),
stops the server, and prints one line: alerts before the switch (the twin states its switch
time in its server info, `switch_at_unix`), the first alert after it (factor, delay from the
switch, ratio and interval, cause and candidates), or that none came. Each run's event lines
are kept under --out (run-K.jsonl), so a miss can be read afterwards.

    .venv/bin/python bench/watch_realtime.py [--runs 10] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

SPECSCOPE = (sys.executable, "-m", "specscope.cli")
SWITCH_AFTER_S = 90
WATCH_S = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _find(obj: Any, key: str) -> Any:
    """The first value of `key` anywhere in a JSON object (the server info nests it)."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            if (found := _find(v, key)) is not None:
                return found
    return None


def _switch_time(url: str) -> float | None:
    """The twin's stated switch time, once it answers (None: it never did)."""
    for _ in range(120):
        try:
            with urllib.request.urlopen(url + "/get_server_info", timeout=2) as r:
                return _find(json.load(r), "switch_at_unix")
        except OSError:
            time.sleep(0.5)
    return None


def _one_run(k: int, out: Path) -> str:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    serve = [*SPECSCOPE, "serve", "--backend", "twin", "--scenario", "healthy"]
    serve += ["--switch-to", "seed-regression", "--switch-after", str(SWITCH_AFTER_S)]
    server = subprocess.Popen(
        [*serve, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        switch = _switch_time(url)
        if switch is None:
            return f"run {k}: the twin did not answer"
        watch = [*SPECSCOPE, "watch", url, "--metrics-url", url + "/metrics"]
        done = subprocess.run(
            [*watch, "--duration", str(WATCH_S), "--json"],
            capture_output=True,
            text=True,
            timeout=WATCH_S + 120,
        )
    finally:
        server.terminate()
        server.wait(20)
    (out / f"run-{k}.jsonl").write_text(done.stdout)
    return _verdict(k, done.returncode, switch, done.stdout)


def _verdict(k: int, rc: int, switch: float, stdout: str) -> str:
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    alerts = [e for e in events if e.get("event") == "alert"]
    before = [(a["factor"], round(a["t"] - switch, 1)) for a in alerts if a["t"] < switch]
    after = [a for a in alerts if a["t"] >= switch]
    head = f"run {k}: exit {rc}, alerts before the switch {before or 0}; "
    if not after:
        return head + "no alert after it"
    a = after[0]
    return head + (
        f"{a['factor']} {a['t'] - switch:.1f} s after it, x{a['ratio']} {a['ci']}, "
        f"cause {a['cause']}, candidates {a.get('candidates')}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", type=Path, default=None, help="where each run's events go")
    args = ap.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="watch_realtime-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"events under {out}; ~{WATCH_S + 10} s a run", file=sys.stderr)
    for k in range(1, args.runs + 1):
        print(_one_run(k, out), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
