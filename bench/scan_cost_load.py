"""The host-per-token fault's calibration under load: one stop-string scan's cost (per call and
per character, serve/faults.scan_cost's method) measured in wall time and in the thread's CPU
time, idle and beside N busy processes, as ratios to the idle figure in the same run.

The fault is sized from this measurement at the server's first request; a figure read too high
shrinks the fault (its repetitions are budget / cost). Wall time counts the moments the process
waits for a core, CPU time does not.

    .venv/bin/python bench/scan_cost_load.py [--busy 5] [--tries 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

from specscope.serve.faults import measure_scan_cost


def _spin() -> None:
    while True:
        pass


def _scan_s(cost: tuple[float, float], chars: int = 1200) -> float:
    """One scan's cost over `chars` characters (~256 generated tokens)."""
    return cost[0] + cost[1] * chars


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", type=int, default=5, help="busy processes beside the measurement")
    ap.add_argument("--tries", type=int, default=3, help="measurements per clock and condition")
    args = ap.parse_args()
    clocks = {"wall": time.perf_counter, "thread CPU": time.thread_time}
    idle = {
        name: min(_scan_s(measure_scan_cost(c)) for _ in range(args.tries))
        for name, c in clocks.items()
    }
    procs = [mp.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for p in procs:
        p.start()
    try:
        time.sleep(0.5)
        loaded = {
            name: [_scan_s(measure_scan_cost(c)) for _ in range(args.tries)]
            for name, c in clocks.items()
        }
    finally:
        for p in procs:
            p.kill()
    print(f"one scan over 1,200 characters; {args.busy} busy processes; ratio to idle, same run")
    for name in clocks:
        ratios = ", ".join(f"{v / idle[name]:.2f}" for v in loaded[name])
        print(f"  {name:>10}: idle {idle[name] * 1e6:.2f} us; loaded / idle {ratios}")


if __name__ == "__main__":
    main()
