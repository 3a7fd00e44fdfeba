"""Benchmark: is the embedded default's speculation (n-gram drafter, tree verify) faster than
plain decoding on this machine, measured the way a user would measure it?

Each configuration of the engine is served on 127.0.0.1 (serve's runner, in-process) and probed
with `specscope probe --json` (a subprocess: the real client, exact-length prompts of the probe's
filler text). The anchor is the engine with no drafter, measured in the same run; configurations
are run in the order plain, chain, tree, plain again, so load drift shows up as a gap between the
two plain rows. Prints decode tok/s, mean commit length, mean step time and the ratio to plain.

    .venv/bin/python bench/embedded_default.py                       # 512-token prompt, 256 tokens, 2 repeats
    .venv/bin/python bench/embedded_default.py --prompt-tokens 256 --max-tokens 64 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from specscope.engine.factory import build_backend
from specscope.serve.options import ServeOptions
from specscope.serve.runner import run_server

CONFIGS: list[tuple[str, dict]] = [
    ("plain", {"drafter": "none"}),
    ("ngram chain k=4", {"drafter": "ngram", "verify": "chain", "num_draft_tokens": 4}),
    (
        "ngram tree k=4 (embedded default)",
        {"drafter": "ngram", "verify": "tree", "num_draft_tokens": 4},
    ),
    ("plain (again)", {"drafter": "none"}),
]


def probe(url: str, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "specscope.cli",
        "probe",
        url,
        "--prompt-tokens",
        str(args.prompt_tokens),
        "--max-tokens",
        str(args.max_tokens),
        "--repeat",
        str(args.repeat),
        "--json",
        "--out",
        str(Path(args.runs) / f"probe-{time.time_ns()}"),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if out.returncode != 0:
        raise SystemExit(f"probe failed ({out.returncode}): {out.stderr[-500:]}")
    return json.loads(out.stdout)["summary"]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument(
        "--runs", default="/tmp/specscope-bench-embedded", help="probe run dirs go here"
    )
    args = ap.parse_args()
    rows = []
    for name, options in CONFIGS:
        handle = run_server(
            build_backend(device=args.device, **options), ServeOptions(log_to_stderr=False)
        )
        try:
            s = probe(handle.url, args)
        finally:
            handle.stop()
        rows.append((name, s))
        print(
            f"  {name:36s} {s['decode_tps']:7.1f} tok/s  commit {s['mean_commit_len'] or 0:5.2f}  "
            f"step {1e3 * (s['mean_step_s'] or 0):6.1f} ms  errors {s['errors']}",
            flush=True,
        )
    plain = [s["decode_tps"] for name, s in rows if name.startswith("plain")]
    anchor = sum(plain) / len(plain)
    print(
        f"\nanchor: plain decoding {anchor:.1f} tok/s (mean of the two plain rows: "
        f"{', '.join(f'{p:.1f}' for p in plain)})"
    )
    for name, s in rows:
        if not name.startswith("plain"):
            print(f"{name:36s} ratio to plain {s['decode_tps'] / anchor:5.2f}x")


if __name__ == "__main__":
    main()
