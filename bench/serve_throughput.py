"""The served engine against the engine alone, in one run (issue #38 done-when).

The engine alone's step at batch C and context 256 (bench/engine_decode.py, a subprocess so
that its threads are gone before the server starts) is the anchor; then `specscope serve
--backend engine` on loopback, loaded by `specscope probe --prompt-tokens 256 --max-tokens 256
--concurrency C --repeat 2 --json` at each level. Printed per level: the served step (probe's
summary.mean_step_s), per-request and aggregate tok/s, the engine alone's step, the ratios
served / engine, and the client's lag (probe's client object: a lagging client would make the
server look slow, hence --workers); then, per level, the server's own account of a step from
its /metrics before and after (bench/serve_profile.step_parts: the engine, the wait beyond it,
the step work after it, the time between steps). No thresholds: the ratios are the figure.
With --drafter ngram the anchor stays the plain step (engine_decode has no drafter): eng/srv
then prices a verify step against a plain one, per-request tok/s against the anchor's is the
served speedup, and the server's own cost is the account's parts beyond its engine.

    python bench/serve_throughput.py --device cpu --concurrency 1,4 [--gguf PATH]
    python3 bench/serve_throughput.py --device cuda --concurrency 1,16,64,256 --workers 4
        [--overlap both]   (served with overlapped steps, then without, same anchor)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from serve_profile import step_parts  # bench/: the script's own folder is on sys.path

ROOT = Path(__file__).resolve().parent.parent
PROMPT, OUTPUT = 256, 256


def engine_alone(args, levels: list[int], work: Path) -> dict[int, float]:
    """The engine's median step (s) at batch C, context 256, from bench/engine_decode.py."""
    out = work / "engine.json"
    cmd = [sys.executable, str(ROOT / "bench/engine_decode.py"), "--device", args.device]
    cmd += ["--batches", ",".join(map(str, levels)), "--contexts", str(PROMPT), "--skip-hf"]
    cmd += ["--json", str(out)]
    cmd += ["--random-weights"] if args.random_weights else ["--model", args.gguf or "smollm2"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rows = json.loads(out.read_text())["rows"]
    return {r["batch"]: r["engine_step_ms"] / 1e3 for r in rows}


def start_server(args, port: int, log: Path, extra: list[str]) -> subprocess.Popen:
    """`specscope serve --backend engine` on loopback; returns once /v1/models answers."""
    cmd = [sys.executable, "-m", "specscope.cli", "serve", "--backend", "engine"]
    cmd += ["--device", args.device, "--drafter", args.drafter, "--port", str(port)]
    cmd += ["--max-batch", str(max(256, args.max_level)), *extra]
    if args.gguf:
        cmd += ["--model", args.gguf]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
            return proc
        except OSError:
            time.sleep(1)
    proc.kill()
    raise SystemExit("server did not start in 600 s")


def probe(url: str, concurrency: int, workers: int, max_tokens: int, repeat: int) -> dict:
    """One probe run's JSON (its summary and client objects)."""
    cmd = [sys.executable, "-m", "specscope.cli", "probe", url, "--prompt-tokens", str(PROMPT)]
    cmd += ["--max-tokens", str(max_tokens), "--concurrency", str(concurrency)]
    cmd += ["--repeat", str(repeat), "--json"]
    if min(workers, concurrency) > 1:  # probe takes at most one worker per slot
        cmd += ["--workers", str(min(workers, concurrency))]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def scrape(url: str) -> str:
    """The server's /metrics text."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        return r.read().decode()


def row(c: int, result: dict, engine_s: float | None) -> str:
    """One table line: served step and rates, the anchor and the ratio, the client's lag. The
    aggregate is C x the per-request decode rate (all C streams decode at once)."""
    s = result.get("summary") or {}
    step, per_req = s.get("mean_step_s"), s.get("decode_tps")
    lag = (s.get("client") or {}).get("lag_p99_s")
    nan = float("nan")
    engine_ms = engine_s * 1e3 if engine_s else nan
    ratio = engine_s / step if step and engine_s else nan
    return (
        f"{c:>5} | {step * 1e3 if step else nan:9.2f} {per_req or nan:9.1f} "
        f"{c * per_req if per_req else nan:9.1f} | {engine_ms:9.2f} "
        f"{c / engine_s if engine_s else nan:9.1f} | {ratio:6.2f} | "
        f"{lag * 1e3 if lag is not None else nan:7.2f}"
    )


# --overlap: serve's own default (on with --device cuda), or both settings one after the
# other against the same anchor (the overlap's effect measured in one run)
VARIANTS = {
    "default": [("", [])],
    "on": [("", ["--overlap"])],
    "off": [("", ["--no-overlap"])],
    "both": [("overlap", ["--overlap"]), ("no_overlap", ["--no-overlap"])],
}


def serve_levels(args, levels: list[int], anchor: dict, work: Path, extra: list[str]) -> None:
    """One server, probed at each level: the table, then the server's account per level."""
    proc = start_server(args, args.port, work / "serve.log", extra)
    url = f"http://127.0.0.1:{args.port}"
    try:
        probe(url, min(8, args.max_level), 1, 16, 1)  # warm-up outside the figures
        print(
            f"{'C':>5} | {'served ms':>9} {'req tok/s':>9} {'agg tok/s':>9} | "
            f"{'engine ms':>9} {'tok/s':>9} | {'eng/srv':>6} | {'lag p99':>7} ms"
        )
        parts = {}
        for c in levels:
            before = scrape(url)
            result = probe(url, c, args.workers, args.max_tokens, args.repeat)
            parts[c] = step_parts(before, scrape(url))
            (work / f"probe_{c}.json").write_text(json.dumps(result))
            print(row(c, result, anchor.get(c)), flush=True)
        for c, lines in parts.items():
            print(f"C={c}, the server's account: " + " ".join(x.strip() for x in lines))
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--concurrency", default=None, help="comma list (cpu 1,4; cuda 1,16,64,256)")
    ap.add_argument("--drafter", default="none", choices=["none", "ngram"])
    ap.add_argument("--workers", type=int, default=1, help="probe client processes")
    ap.add_argument("--gguf", default=None, help="weights (default: the packaged SmolLM2)")
    ap.add_argument("--random-weights", action="store_true", help="refused: serve has none")
    ap.add_argument(
        "--threads", type=int, default=None, help="torch threads, both sides (cpu default 1)"
    )
    ap.add_argument("--port", type=int, default=30123)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=OUTPUT)
    ap.add_argument(
        "--overlap",
        default="default",
        choices=list(VARIANTS),
        help="serve's --overlap: its default, on, off, or both one after the other",
    )
    args = ap.parse_args()
    cuda = args.device == "cuda"
    levels = [int(x) for x in (args.concurrency or ("1,16,64,256" if cuda else "1,4")).split(",")]
    args.max_level = max(levels)
    threads = args.threads or (None if cuda else 1)
    if threads:  # a shared CPU: more torch threads than free cores spin (10x slower steps)
        os.environ["OMP_NUM_THREADS"] = str(threads)
    if args.random_weights:
        raise SystemExit("serve loads real weights only: pass --gguf PATH or nothing (SmolLM2)")
    work = Path(tempfile.mkdtemp(prefix="serve_throughput_"))
    anchor = engine_alone(args, levels, work)
    if args.drafter != "none":
        print(
            f"--drafter {args.drafter}: the engine alone is the plain step; eng/srv prices a "
            "verify step against it, the account's parts beyond its engine are the server's"
        )
    for name, extra in VARIANTS[args.overlap]:
        if name:
            print(f"== served with {' '.join(extra)}", flush=True)
        folder = work / name if name else work
        folder.mkdir(exist_ok=True)
        serve_levels(args, levels, anchor, folder, extra)
    print(f"files: {work}")


if __name__ == "__main__":
    main()
