"""Held-out evaluation of a saved drafter: what it buys (tau) and that it costs nothing (lossless).

The drafter is loaded the way a served engine loads it (`--drafter dflash:PATH`), and each
held-out category is decoded plain and speculatively (chain and DDTree): tau is the tokens
committed per target verify step, and the speculative output must equal the plain greedy one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specscope.engine.loader import LoadedModel
from specscope.engine.training.prompts import Prompt
from specscope.engine.training.target import generate


def evaluate(
    loaded: LoadedModel,
    drafter_dir: Path,
    prompts: list[Prompt],
    tokens: int,
    block_size: int,
    budget: int,
    cuda_graphs: bool = True,
    references: list[list[int]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per category: tau (tokens per verify step) for chain (k = B-1) and DDTree, and whether
    each equals plain greedy output (lossless). `references`: the plain greedy responses of
    `prompts` already generated (the held-out sequences, cut to `tokens`); else generated here."""
    out: dict[str, dict[str, Any]] = {}
    depth = block_size - 1
    modes = {
        "chain": {"verify": "chain", "num_draft_tokens": depth},
        "tree": {"verify": "tree", "num_draft_tokens": depth, "budget": budget},
    }
    for cat in dict.fromkeys(c for c, _ in prompts):
        ids = [p for c, p in prompts if c == cat]
        if references is not None:
            plain = [r for (c, _), r in zip(prompts, references, strict=True) if c == cat]
        else:
            plain, _ = generate(loaded, ids, tokens, batch=len(ids), cuda_graphs=cuda_graphs)
        row: dict[str, Any] = {"prompts": len(ids), "tokens": sum(map(len, plain))}
        for mode, spec in modes.items():
            spec_out, steps = generate(
                loaded,
                ids,
                tokens,
                batch=1,
                cuda_graphs=cuda_graphs,
                spec={"drafter": f"dflash:{drafter_dir}", **spec},
            )
            row[f"tau_{mode}"] = round(sum(map(len, spec_out)) / max(steps, 1), 3)
            row[f"lossless_{mode}"] = spec_out == plain
        out[cat] = row
    return out
