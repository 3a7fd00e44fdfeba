"""The speculative step: draft -> build (chain or DDTree) -> ONE target forward -> accept -> commit.

`EngineBackend.step_sync` hands the whole step here when a drafter is configured. Per request:

1. draft: the drafter proposes for every live request at once (`Drafter.propose`);
2. tree: a chain (one sequence) or a DDTree of `budget` nodes is built around the pending token
   (the last committed token, whose KV is not written yet) as the root;
3. verify: one batched target forward over every tree's nodes, with depth-based positions and
   the ancestor-only mask (chains use the plain causal mask), K/V written to fresh pending rows;
4. commit: walk the accepted path (argmax at T = 0, rejection/target-only sampling at T > 0),
   then make the accepted rows the next context rows — `compact` copies them to the front of
   the pending rows (skipped when already there), `inplace` keeps them where they are and
   rewrites the page table instead (token-granular, so page_size 1 only: the SGLang way, which
   leaves the request's KV physically scattered) — and free the rest.

Invariant kept with the backend: the KV cache holds every committed token except the last one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from specscope.engine.model import ForwardBatch, NewTokens
from specscope.engine.sampling import probabilities
from specscope.engine.spec.drafter import Draft, Drafter, DraftRequest
from specscope.engine.spec.tree import DraftTree, build_ddtree, chain_tree, trie_tree
from specscope.engine.spec.verify import (
    Verdict,
    verify_chain_sampled,
    verify_greedy,
    verify_tree_sampled,
)
from specscope.serve.backend import BackendError, BatchStep

VERIFY_MODES = ("chain", "tree")
TREE_KV_MODES = ("compact", "inplace")


@dataclass
class SpecConfig:
    verify: str = "chain"
    num_draft_tokens: int = 4  # k: drafted depth (chain length, tree depth)
    budget: int = 16  # tree mode: drafted nodes per step (root excluded)
    tree_kv: str = "compact"

    def __post_init__(self) -> None:
        if self.verify not in VERIFY_MODES:
            raise ValueError(f"verify must be one of {VERIFY_MODES}, got {self.verify!r}")
        if self.tree_kv not in TREE_KV_MODES:
            raise ValueError(f"tree_kv must be one of {TREE_KV_MODES}, got {self.tree_kv!r}")
        if self.num_draft_tokens < 1 or self.budget < 1:
            raise ValueError("num_draft_tokens and budget must be >= 1")

    @property
    def max_nodes(self) -> int:
        """Pending KV rows one verify needs beyond the context (root included)."""
        return 1 + (self.budget if self.verify == "tree" else self.num_draft_tokens)


class SpeculativeStepper:
    def __init__(self, drafter: Drafter, config: SpecConfig):
        self.drafter = drafter
        self.config = config

    # -- wiring -------------------------------------------------------------------------------
    def attach(self, backend) -> None:
        """Make `backend` (an EngineBackend) step speculatively and say so in its info."""
        if self.config.tree_kv == "inplace" and backend.kv.page_size != 1:
            raise ValueError("tree_kv inplace rewrites the page table per token: needs page_size 1")
        backend.spec = self
        backend.kv_headroom_tokens = max(backend.kv_headroom_tokens, self.config.max_nodes)
        info = backend.info
        info.spec_algorithm = "DDTREE" if self.config.verify == "tree" else "CHAIN"
        # SGLang's convention: tokens per verify forward, root included (accept rate divides by
        # num_draft_tokens - 1; the histogram has a bucket per accepted-draft count 0..k).
        info.num_draft_tokens = self.config.max_nodes
        info.extra.update(
            drafter=self.drafter.name,
            verify=self.config.verify,
            spec_depth=self.config.num_draft_tokens,
            tree_budget=self.config.budget,
            tree_kv=self.config.tree_kv,
        )

    def release(self, request_id: str) -> None:
        self.drafter.release(request_id)

    # -- the step -----------------------------------------------------------------------------
    def step_sync(self, backend, request_ids: Sequence[str]) -> BatchStep:
        t0 = time.perf_counter()
        missing = [r for r in request_ids if r not in backend.requests]
        if missing:
            raise BackendError(f"unknown or released request(s): {missing}", 404)
        reqs = [backend.requests[r] for r in request_ids]
        live = [r for r in reqs if not r.finished]
        timing = {"draft": 0.0, "tree": 0.0, "verify": 0.0, "commit": 0.0}
        results: dict[str, tuple[list[int], Verdict, int]] = {}
        if live:
            depths = [self._depth(backend, r) for r in live]
            drafts = self.drafter.propose(
                [
                    DraftRequest(r.request_id, r.tokens, k, r.params.temperature, r.params.seed)
                    for r, k in zip(live, depths, strict=True)
                ]
            )
            t1 = time.perf_counter()
            trees = [self._build(r.tokens[-1], d, k) for r, d, k in zip(live, drafts, depths, strict=True)]
            t2 = time.perf_counter()
            slots, logits = self._verify(backend, live, trees)
            t3 = time.perf_counter()
            for i, (r, d, tree) in enumerate(zip(live, drafts, trees, strict=True)):
                verdict = self._accept(r, d, tree, logits[i, : len(tree.tokens)])
                self._commit_kv(backend.kv, r.seq, slots[i], verdict.path)
                results[r.request_id] = (verdict.committed, verdict, tree.num_nodes)
            timing.update(draft=t1 - t0, tree=t2 - t1, verify=t3 - t2)
        outputs = []
        for r in reqs:
            committed, verdict, proposed = results.get(r.request_id, ([], None, 0))
            out = backend.accept_tokens(r, committed)
            if verdict is not None:
                out.accepted_drafts = verdict.accepted_drafts
                out.proposed_drafts = proposed
                out.accepted_per_position = verdict.accepted_per_position
            outputs.append(out)
        step_s = time.perf_counter() - t0
        if live:
            timing["commit"] = step_s - timing["draft"] - timing["tree"] - timing["verify"]
        return BatchStep(outputs=outputs, step_s=step_s, timing=timing)

    def _depth(self, backend, req) -> int:
        """Draft no deeper than the tokens the request may still emit (the bonus is one)."""
        left = min(
            req.params.max_tokens - len(req.generated),
            backend.max_context - len(req.tokens),
        )
        return max(0, min(self.config.num_draft_tokens, left - 1))

    def _build(self, root: int, draft: Draft, depth: int) -> DraftTree:
        cfg = self.config
        if depth <= 0:
            return chain_tree(root, [])
        if cfg.verify == "chain":
            return chain_tree(root, draft.chain[:depth])
        if draft.topk_tokens is not None:
            return build_ddtree(root, draft.topk_tokens[:depth], draft.topk_logprobs[:depth], cfg.budget)
        return trie_tree(root, [s[:depth] for s in draft.sequences], cfg.budget)

    def _verify(self, backend, live, trees: list[DraftTree]) -> tuple[list[torch.Tensor], torch.Tensor]:
        kv = backend.kv
        items, slots = [], []
        for r, tree in zip(live, trees, strict=True):
            start = r.seq.context_len
            s = kv.alloc_slots(r.seq, len(tree.tokens))
            slots.append(s)
            is_chain = bool(np.all(tree.parents[1:] == np.arange(len(tree.tokens) - 1)))
            mask = None if is_chain else torch.from_numpy(tree.attention_mask())
            items.append(NewTokens(tree.tokens.tolist(), tree.positions(start).tolist(), s, r.seq.context, mask))
        batch = ForwardBatch.pack(items, backend.lm.device, kv.pad_slot)
        logits = backend.model(batch, kv)
        if logits.is_cuda:
            torch.cuda.synchronize()
        return slots, logits

    def _accept(self, req, draft: Draft, tree: DraftTree, logits: torch.Tensor) -> Verdict:
        p = req.params
        if p.temperature <= 0:
            return verify_greedy(tree, logits.argmax(dim=-1).tolist())
        rng = req.state.get("spec_rng")
        if rng is None:  # derived from the request's seeded generator: reproducible per seed
            seed = int(torch.randint(0, 2**62, (1,), generator=req.generator).item())
            rng = req.state["spec_rng"] = np.random.default_rng(seed)
        probs = probabilities(logits, p.temperature, p.top_p).double().numpy()
        probs /= probs.sum(axis=-1, keepdims=True)
        if self.config.verify == "tree":
            return verify_tree_sampled(tree, probs, rng)
        drafted = tree.tokens[1:].tolist()
        q = draft.q_probs[: len(drafted)] if draft.q_probs is not None and draft.sequences else None
        return verify_chain_sampled(drafted, probs, rng, q)

    def _commit_kv(self, kv, seq, slots: torch.Tensor, path: list[int]) -> None:
        """Make the accepted nodes' K/V the context rows start..start+a; free the others."""
        start = seq.context_len
        kept = len(path)
        if self.config.tree_kv == "inplace":
            # Page size 1: row -> slot is the page table itself; point the next rows at the
            # accepted slots (no copy) and move the rejected ones past the end to be freed.
            tail = seq.pages[start:]
            accepted = set(path)
            seq.pages[start:] = [tail[j] for j in path] + [tail[j] for j in range(len(tail)) if j not in accepted]
            kv.commit(seq, slots[path])
        else:
            if path != list(range(kept)):  # fast path: a chain prefix is already in place
                kv.move_rows(slots[path], slots[:kept])
            kv.commit(seq, slots[:kept])
        kv.truncate(seq, start + kept)
