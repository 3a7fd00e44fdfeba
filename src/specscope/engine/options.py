"""The engine's options as typed, validated values (what `build_backend` takes).

`EngineOptions.from_flags(**flags)` is the door for the CLI and other callers holding loose
keyword flags: an unknown name is an error (a typo must not silently fall back to a default).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from specscope.engine.faults import parse_engine_faults
from specscope.engine.speculative.faults import check_drafter_faults

DEVICES = ("cpu", "cuda")
KV_POLICIES = ("contiguous", "scattered")
VERIFY_MODES = ("chain", "tree")
TREE_KV_MODES = ("compact", "inplace")
# The DFlash block's attention (dflash_model.grouped_attention says why there are two)
DRAFT_ATTENTION = ("sdpa", "grouped")


@dataclass(frozen=True)
class SpeculationOptions:
    """How to draft and verify. drafter: "ngram" | "model:PATH" (same vocabulary as the target)
    | "layers:N" (early exit: the target's first N layers, weights shared) | "dflash:PATH"
    (a DFlash block drafter: a folder with config.json + model.safetensors, or a shipped name)."""

    drafter: str = "ngram"
    verify: str = "chain"
    num_draft_tokens: int = 4  # k: drafted depth (chain length, tree depth)
    budget: int = 16  # tree mode: drafted nodes per step (root excluded)
    draft_window: int | None = None  # tokens the drafter sees; None/0 = all
    tree_kv: str = "compact"
    # ngram_min 3: a 1- or 2-token match is mostly wrong, and a wrong draft costs a wider verify
    # (bench/engine_spec.py: min 1 lost ~10% on code completion on CPU, min 3 won on edits).
    ngram_min: int = 3
    ngram_max: int = 4
    ngram_candidates: int | None = None  # default: 4 for tree, 1 for chain
    draft_top_k: int | None = None  # model drafter's candidates per depth (tree default min(8, B))
    draft_attention: str | None = None  # DFlash's block attention (DRAFT_ATTENTION; None: default)
    faults: tuple[str, ...] = ()  # drafter faults (speculative/faults.py, docs/faults.md)

    def __post_init__(self) -> None:
        if self.verify not in VERIFY_MODES:
            raise ValueError(f"verify must be one of {VERIFY_MODES}, got {self.verify!r}")
        if self.tree_kv not in TREE_KV_MODES:
            raise ValueError(f"tree_kv must be one of {TREE_KV_MODES}, got {self.tree_kv!r}")
        if self.num_draft_tokens < 1 or self.budget < 1:
            raise ValueError("num_draft_tokens and budget must be >= 1")
        check_drafter_faults(self.faults)
        if self.draft_attention is not None and self.draft_attention not in DRAFT_ATTENTION:
            raise ValueError(
                f"draft_attention must be one of {DRAFT_ATTENTION}, got {self.draft_attention!r}"
            )
        if not (
            self.drafter == "ngram" or self.drafter.startswith(("model:", "layers:", "dflash:"))
        ):
            raise ValueError(
                f"unknown drafter {self.drafter!r} "
                "(expected none, ngram, model:PATH, layers:N or dflash:PATH)"
            )

    @property
    def max_nodes(self) -> int:
        """Tokens one verify forward carries (root included): the KV rows it needs past the
        context, and the node budget of the captured verify graph."""
        return 1 + (self.budget if self.verify == "tree" else self.num_draft_tokens)


@dataclass(frozen=True)
class EngineOptions:
    model: str = "smollm2"  # "smollm2" | a .gguf file | a Hugging Face folder
    device: str = "cpu"
    page_size: int = 16
    kv_alloc: str = "contiguous"
    max_batch: int = 8
    kv_pool_tokens: int | None = None  # default: max_batch full contexts, capped per device
    seed: int | None = None
    # CUDA only: paged attention kernel + CUDA graphs per batch bucket, and the DFlash drafter's
    # batch-1 step as CUDA graphs (False: the eager path, the same one the CPU runs).
    cuda_graphs: bool = True
    # fuse the token-wise layer parts and the DFlash drafter's captured step (graphs work without)
    torch_compile: bool = True
    single_token_gemv: bool = True  # batch-1 decode: fused multiply-reduce instead of cuBLAS
    speculation: SpeculationOptions | None = None
    # the `graph-off-above=B` fault (engine/faults.py): batches above B leave the CUDA graphs
    graph_off_above: int | None = None
    # plain greedy decode steps overlapped with the host's work on the step before
    # (engine/overlap.py). None: on where the device runs the step asynchronously (CUDA);
    # on the CPU a forward is the host's own work, so there is nothing to overlap.
    overlap: bool | None = None

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")
        if self.kv_alloc not in KV_POLICIES:
            raise ValueError(f"kv_alloc must be one of {KV_POLICIES}, got {self.kv_alloc!r}")
        if self.page_size < 1 or self.max_batch < 1:
            raise ValueError("page_size and max_batch must be >= 1")
        if self.graph_off_above is not None and self.graph_off_above < 1:
            raise ValueError(f"graph_off_above must be >= 1, got {self.graph_off_above}")

    @classmethod
    def from_flags(cls, **flags: Any) -> EngineOptions:
        """Options from flat keyword flags (the CLI's names; speculation ones included).
        `drafter` absent or "none" means no speculation. `faults` holds every engine fault
        (`NAME[=VALUE]`): the runner's become options here, the drafter's stay with the
        speculation options. Unknown names raise ValueError."""
        flags = dict(flags)
        if flags.get("faults"):
            parsed = parse_engine_faults(flags["faults"])
            flags["faults"] = parsed.drafter or None
            if parsed.graph_off_above is not None:
                flags["graph_off_above"] = parsed.graph_off_above
        engine_names = {f.name for f in fields(cls)} - {"speculation"}
        spec_names = {f.name for f in fields(SpeculationOptions)}
        unknown = set(flags) - engine_names - spec_names
        if unknown:
            raise ValueError(f"unknown engine option(s): {', '.join(sorted(unknown))}")
        given = {k: v for k, v in flags.items() if v is not None}
        spec = {k: given.pop(k) for k in list(given) if k in spec_names}
        drafter = spec.get("drafter", "none")
        if (not drafter or drafter == "none") and spec.get("faults"):
            raise ValueError(f"fault(s) {list(spec['faults'])} need a drafter (--drafter ngram)")
        speculation = None if not drafter or drafter == "none" else SpeculationOptions(**spec)
        return cls(**given, speculation=speculation)
