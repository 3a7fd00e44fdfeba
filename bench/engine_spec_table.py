"""The step's split of `bench/engine_spec.py --json` runs, one row a configuration, read back.

engine_spec prints speed against plain decode and the split's parts; what a drafting-cost
question needs beside them is each configuration's whole step (seconds over steps, the host's
time between the parts included) and the drafting it paid (draft + observe: with the DFlash
step launched at observe, "observe" holds the launch and "draft" the wait). One table a run, the
plain step of the same run beside it, so runs from different calls are compared as ratios.

    .venv/bin/python bench/engine_spec_table.py bench/results/dflash_engine_spec_h100_7.json
    .venv/bin/python bench/engine_spec_table.py bench/results/dflash_h100_7_runs.tar.xz

A tarball (`.tar.xz`, `.tgz`, ...) reads every engine_spec.json inside it (a device session's runs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path


def runs(path: Path) -> Iterator[tuple[str, dict]]:
    """(name, engine_spec JSON) for a JSON file, or for each engine_spec.json in a tarball."""
    if not tarfile.is_tarfile(path):
        yield str(path), json.loads(path.read_text())
        return
    with tarfile.open(path) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if member.isfile() and member.name.endswith("engine_spec.json"):
                data = tar.extractfile(member)
                if data is not None:
                    yield f"{path.name}:{member.name}", json.loads(data.read())


def rows(results: dict) -> Iterator[str]:
    """One line a configuration: against plain, commit, step ms, drafting, then the split."""
    for set_name, configs in results.items():
        plain = configs.get("engine plain")
        if not plain:
            continue
        plain_ms = 1e3 * plain["secs"] / plain["steps"]
        yield f"  {Path(set_name).stem}: plain step {plain_ms:.2f} ms, {plain['tok_s']:.0f} tok/s"
        for name, r in configs.items():
            if name == "engine plain" or not r.get("steps"):
                continue
            split = r.get("split", {})
            drafting = split.get("draft", 0.0) + split.get("observe", 0.0)
            parts = " ".join(f"{k} {v:.2f}" for k, v in sorted(split.items()))
            # a drafter named by its folder alone: dflash[.../dflash-smollm2-135m] -> its last part
            label = re.sub(r"\[[^\]]*/([^/\]]+)\]", r"[\1]", name).replace("engine ", "")
            yield (
                f"    {label:40} {r['tok_s'] / plain['tok_s']:5.2f}x  commit {r['commit']:.2f}  "
                f"step {1e3 * r['secs'] / r['steps']:.2f} ms  drafting {drafting:.2f}  ({parts})"
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="engine_spec JSON files or tarballs")
    args = ap.parse_args()
    for path in args.paths:
        if not path.is_file():
            print(f"engine_spec_table: no such file: {path}", file=sys.stderr)
            return 2
        try:
            found = list(runs(path))
        except (ValueError, tarfile.TarError) as e:  # JSONDecodeError, UnicodeDecodeError
            print(f"engine_spec_table: {path} is not engine_spec JSON: {e}", file=sys.stderr)
            return 2
        try:
            _print_tables(found)
        except BrokenPipeError:  # `... | head` closed the pipe: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
    return 0


def _print_tables(found: list[tuple[str, dict]]) -> None:
    """One table a run: its name and settings, then a line per configuration and set."""
    for name, data in found:
        a = data.get("args", {})
        print(
            f"== {name}  (dtype {a.get('dtype') or 'default'}, {a.get('file_prompts')} prompts a set)"
        )
        for line in rows(data.get("results", {})):
            print(line)


if __name__ == "__main__":
    sys.exit(main())
