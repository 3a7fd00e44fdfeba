"""The speculative step: draft -> build (chain or DDTree) -> ONE target forward -> accept -> commit.

Per step, for every live request at once:

1. draft: the drafter proposes for every live request at once (`Drafter.propose`);
2. tree: a chain (one sequence) or a DDTree of `budget` nodes is built around the pending token
   (the last committed token, whose KV is not written yet) as the root;
3. verify: one batched target forward (`Runner.forward`) over every tree's nodes, with
   depth-based positions and the ancestor-only mask (chains use the plain causal mask), K/V
   written to fresh pending rows;
4. commit: walk the accepted path (argmax at T = 0, rejection/target-only sampling at T > 0);
   a drafter on the target's hidden states observes the accepted rows first, with the next
   step's anchor (timed apart: "observe"; DFlash may start its next draft then, so the device
   drafts while the host commits); then make the accepted rows the next context rows —
   `compact` copies them to the front of the pending rows (skipped when already there),
   `inplace` keeps them where they are and reorders the page table over them instead
   (token-granular, so page_size 1 only: the SGLang way, which leaves the request's KV
   physically scattered) — and free the rest.

Invariant kept with the backend: the KV cache holds every committed token except the last one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from specscope.engine.kv_cache import KVCache, SeqKV
from specscope.engine.options import SpeculationOptions
from specscope.engine.request import Request
from specscope.engine.runner import Runner, Work
from specscope.engine.sampling import RowDraws, probabilities
from specscope.engine.speculative.drafter import Draft, Drafter, DraftRequest, HiddenStateDrafter
from specscope.engine.speculative.tree import DraftTree, build_ddtree, chain_tree, trie_tree
from specscope.engine.speculative.verify import (
    Verdict,
    verify_chain_sampled,
    verify_greedy,
    verify_tree_sampled,
)
from specscope.engine.stepper import Proposal, SpeculationInfo, StepResult


class SpeculativeStepper:
    def __init__(self, drafter: Drafter, config: SpeculationOptions):
        self.drafter = drafter
        self.config = config
        self.max_nodes = config.max_nodes
        self.target_taps: tuple[int, ...] = (
            tuple(drafter.target_taps) if isinstance(drafter, HiddenStateDrafter) else ()
        )

    def speculation(self) -> SpeculationInfo:
        cfg = self.config
        # SGLang's convention: tokens per verify forward, root included (accept rate divides by
        # num_draft_tokens - 1; the histogram has a bucket per accepted-draft count 0..k).
        return SpeculationInfo(
            algorithm="DDTREE" if cfg.verify == "tree" else "CHAIN",
            num_draft_tokens=cfg.max_nodes,
            extra={
                "drafter": self.drafter.name,
                "verify": cfg.verify,
                "spec_depth": cfg.num_draft_tokens,
                "tree_budget": cfg.budget,
                "tree_kv": cfg.tree_kv,
                # The drafter's context window, as SGLang states its own (server info).
                **({"draft_window": cfg.draft_window} if cfg.draft_window else {}),
                # A drafter restricted to part of the vocabulary never drafts the rest.
                **({"draft_vocab": vocab} if (vocab := self._draft_vocab()) else {}),
            },
        )

    def _draft_vocab(self) -> int:
        """Tokens the drafter may draft, where it is restricted (DFlash's draft vocabulary)."""
        return int(getattr(self.drafter, "draft_vocab_size", 0))

    def release(self, request_id: str) -> None:
        self.drafter.release(request_id)

    def observe_prefill(self, request_id: str, hidden: torch.Tensor) -> None:
        if self.target_taps:
            self.drafter.observe(request_id, hidden)  # type: ignore[attr-defined]

    def step(self, runner: Runner, live: Sequence[Request], max_context: int) -> StepResult:
        t0 = time.perf_counter()
        depths = [self._depth(r, max_context) for r in live]
        drafts = self.drafter.propose(
            [
                DraftRequest(r.request_id, r.tokens, k, r.params.temperature, r.params.seed)
                for r, k in zip(live, depths, strict=True)
            ]
        )
        t1 = time.perf_counter()
        trees = [
            self._build(r.tokens[-1], d, k) for r, d, k in zip(live, drafts, depths, strict=True)
        ]
        t2 = time.perf_counter()
        work = []
        for r, tree in zip(live, trees, strict=True):
            is_chain = bool(np.all(tree.parents[1:] == np.arange(len(tree.tokens) - 1)))
            work.append(
                Work(
                    r.seq,
                    tree.tokens.tolist(),
                    tree.positions(r.seq.context_len).tolist(),
                    None if is_chain else tree.attention_mask(),
                )
            )
        if self.target_taps:
            slots, logits, hidden = runner.forward_hidden(work, self.target_taps)
        else:
            (slots, logits), hidden = runner.forward(work), []
        assert logits is not None
        greedy = logits.argmax() if any(r.params.temperature <= 0 for r in live) else None
        t3 = time.perf_counter()
        proposals = {}
        observe_s = 0.0
        for i, (r, d, tree) in enumerate(zip(live, drafts, trees, strict=True)):
            if r.params.temperature <= 0:
                assert greedy is not None
                verdict = verify_greedy(tree, greedy[i])
            else:
                verdict = self._sampled(r, d, tree, logits.tensor[i, : len(tree.tokens)])
            if hidden:  # the accepted nodes are the next context rows: their features too
                t = time.perf_counter()
                # First, and with the next propose's anchor: the drafter may start that step
                # now, while the host commits the KV and the engine takes the tokens.
                self.drafter.observe(  # type: ignore[attr-defined]
                    r.request_id, hidden[i], verdict.path, anchor=verdict.committed[-1]
                )
                observe_s += time.perf_counter() - t
            self._commit_kv(runner.kv, r.seq, slots[i], verdict.path)
            proposals[r.request_id] = Proposal(
                verdict.committed,
                verdict.accepted_drafts,
                tree.num_nodes,
                verdict.accepted_per_position,
            )
        return StepResult(
            proposals,
            {
                "draft": t1 - t0,
                "tree": t2 - t1,
                "verify": t3 - t2,
                # A drafter on the target's hidden states: its context update, apart (on CUDA
                # it is launched here and finishes before the next draft's sync).
                **({"observe": observe_s} if self.target_taps else {}),
                "commit": time.perf_counter() - t3 - observe_s,
            },
        )

    def _depth(self, req: Request, max_context: int) -> int:
        """Draft no deeper than the tokens the request may still emit (the bonus is one)."""
        return max(0, min(self.config.num_draft_tokens, req.room(max_context) - 1))

    def _build(self, root: int, draft: Draft, depth: int) -> DraftTree:
        cfg = self.config
        if depth <= 0:
            return chain_tree(root, [])
        if cfg.verify == "chain":
            return chain_tree(root, draft.chain[:depth])
        if draft.topk_tokens is not None:
            return build_ddtree(
                root, draft.topk_tokens[:depth], draft.topk_logprobs[:depth], cfg.budget
            )
        return trie_tree(root, [s[:depth] for s in draft.sequences], cfg.budget)

    def _sampled(
        self, req: Request, draft: Draft, tree: DraftTree, logits: torch.Tensor
    ) -> Verdict:
        """T > 0. A tree: the walk draws from the target at the nodes it reaches, on the
        logits' device, from the request's own generator (reproducible per seed; RowDraws):
        a few ids come back, not every node's full-vocabulary distribution. A chain: rejection
        sampling against the drafter's q, which reads the distributions on the host."""
        p = req.params
        if self.config.verify == "tree":
            draws = RowDraws(logits, p.temperature, p.top_p, req.generator)
            return verify_tree_sampled(tree, draws)
        rng = req.state.get("spec_rng")
        if rng is None:  # derived from the request's seeded generator: reproducible per seed
            seed = int(torch.randint(0, 2**62, (1,), generator=req.generator).item())
            rng = req.state["spec_rng"] = np.random.default_rng(seed)
        probs = probabilities(logits, p.temperature, p.top_p).double().numpy()
        probs /= probs.sum(axis=-1, keepdims=True)
        drafted = tree.tokens[1:].tolist()
        q = draft.q_probs[: len(drafted)] if draft.q_probs is not None and draft.sequences else None
        return verify_chain_sampled(drafted, probs, rng, q)

    def _commit_kv(self, kv: KVCache, seq: SeqKV, slots: list[int], path: list[int]) -> None:
        """Make the accepted nodes' K/V the context rows start..start+a; free the others."""
        start = seq.context_len
        kept = len(path)
        if path != list(range(kept)):  # a chain prefix is already in place
            if self.config.tree_kv == "inplace":
                # Page size 1: point the next rows at the accepted slots (no copy).
                kv.reorder_rows(seq, start, path)
            else:
                kv.move_rows([slots[j] for j in path], slots[:kept])
        kv.commit(seq, kept)
        kv.truncate(seq, start + kept)
