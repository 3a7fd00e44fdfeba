"""What the `detok-full` fault costs a step, against the incremental detokenizer (the anchor, in
the same run): the whole output re-detokenized at every step grows with the output, the
incremental one (prefix and read offsets) does not. Real SmolLM2 tokenizer, real article text.

    python3 bench/detok_cost.py --tokens 256,1500

A fault whose cost is below a machine's noise is documented as null there (docs/faults.md):
compare the figure with that machine's step time (the fault matrix's decode tps).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from specscope.engine.loader import load_checkpoint, resolve  # noqa: E402
from specscope.serve.textstream import FullTextStream, TextStream  # noqa: E402

TEXT = ROOT / "src" / "specscope" / "probe" / "workloads" / "texts" / "articles.txt"
LAST = 32  # steps averaged at the end of the output


def step_costs(stream: TextStream, ids: list[int]) -> list[float]:
    """Seconds each one-token step spends in the stream's `add`."""
    out = []
    for i in ids:
        t0 = time.perf_counter()
        stream.add([i])
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", default="256,1500", help="output lengths, comma-separated")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    tok = load_checkpoint(resolve("smollm2"))[2]
    ids = tok.encode(TEXT.read_text(encoding="utf-8"))
    print(
        f"{'tokens':>7} {'incremental us/step':>20} {'full us/step':>13} {'full / incremental':>19}"
    )
    for n in (int(x) for x in args.tokens.split(",")):
        if n > len(ids):
            sys.exit(f"--tokens: the text has only {len(ids)} tokens")
        inc, full = [], []
        for _ in range(args.repeats):
            inc.append(statistics.mean(step_costs(TextStream(tok.decode), ids[:n])[-LAST:]))
            full.append(statistics.mean(step_costs(FullTextStream(tok.decode), ids[:n])[-LAST:]))
        a, b = statistics.median(inc), statistics.median(full)
        print(f"{n:>7} {a * 1e6:>20.1f} {b * 1e6:>13.1f} {b / a:>19.1f}")


if __name__ == "__main__":
    main()
