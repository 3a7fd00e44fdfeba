"""What a training run records as it goes, and carries across a stop and `--resume`.

The loss curve (the mean over each logging window, with the window's training tokens/s: label
slots, anchors x (B-1), per second of training steps), per-slot accuracy over the whole run and
over its last tenth, and the held-out points. Its state is plain JSON (checkpoint.py stores it)
and its clock adds up the calls of a resumed run, so the card of a run that stopped and resumed
reads like one run's.

A step's loss and accuracy stay on the device until a curve point (`settle`): reading them
every step made the host wait for the GPU before it could draw and pack the next step, and a
step's host side (anchors, packing, the copies to the device) then ran after the GPU's work
instead of beside it. On the H100 (2026-12-05) the run trained at ~117k label tokens/s where
the trainer bench, which reads nothing back between steps, went at 344k.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch


class Tally:
    def __init__(self, slots: int, total: int):
        self.total, self.t0, self.before_s = total, time.perf_counter(), 0.0
        self.acc_sum, self.acc_n = np.zeros(slots), 0  # per-slot accuracy over the whole run
        self.recent_sum, self.recent_n = np.zeros(slots), 0  # over the last tenth of the run
        self.window: list[float] = []
        self.window_tokens, self.window_s = 0, 0.0
        self.tokens, self.step_s = 0, 0.0  # label slots trained and seconds spent in steps
        self.curve: list[dict[str, float]] = []
        self.validation: list[dict[str, Any]] = []
        # Steps recorded and not read yet: (0-based step, loss, accuracy [G, B-1]) on the device
        self.pending: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        self.clock: float | None = None  # when the running stretch of training steps began

    def elapsed(self) -> float:
        return self.before_s + time.perf_counter() - self.t0

    def accuracy(self, step: int, acc: np.ndarray) -> None:
        """Per-slot accuracy of each sequence [G, B-1] of (0-based) `step`."""
        self.acc_sum += acc.sum(0)
        self.acc_n += len(acc)
        if step >= self.total - max(1, self.total // 10):
            self.recent_sum += acc.sum(0)
            self.recent_n += len(acc)

    def start(self) -> None:
        """Training time runs from here (a no-op while it runs): a step's time is only known
        at the next `settle`, which waits for the device."""
        if self.clock is None:
            self.clock = time.perf_counter()

    def record(
        self,
        step: int,
        loss: torch.Tensor,
        acc: torch.Tensor,
        lr: float,
        tokens: int,
        every: int,
        log,
    ) -> None:
        """(0-based) `step`'s loss, per-sequence per-slot accuracy and label slots, left where
        they are; every `every` steps and at the end they are read and make a curve point."""
        self.pending.append((step, loss.detach(), acc.detach()))
        self.window_tokens += tokens
        self.tokens += tokens
        done = step + 1
        if done % every and done != self.total:
            return
        self.settle()
        point = {
            "step": done,
            "loss": round(float(np.mean(self.window)), 4),
            "lr": lr,
            "elapsed_s": round(self.elapsed(), 1),
            "tokens_per_s": round(self.window_tokens / max(self.window_s, 1e-9)),
        }
        self.curve.append(point)
        log(f"train: {point} slot-1 acc (run mean) {self.acc_sum[0] / max(self.acc_n, 1):.3f}")
        self.window, self.window_tokens, self.window_s = [], 0, 0.0

    def settle(self) -> None:
        """Read the pending steps (one wait for the device) into the window and the accuracy
        sums, and stop the clock there: before a curve point, a held-out check or a
        checkpoint, whose time is not training time."""
        if self.pending:
            losses = torch.stack([loss.float() for _, loss, _ in self.pending]).cpu()
            accs = torch.cat([acc.float() for _, _, acc in self.pending]).cpu().numpy()
            at = 0
            for step, _, acc in self.pending:
                self.accuracy(step, accs[at : at + len(acc)])
                at += len(acc)
            self.window += losses.tolist()
            self.pending = []
        if self.clock is not None:
            spent = time.perf_counter() - self.clock
            self.window_s += spent
            self.step_s += spent
            self.clock = None

    def state(self) -> dict[str, Any]:
        """JSON for a checkpoint (the pending steps read first)."""
        self.settle()
        return {
            k: v.tolist() if isinstance(v, np.ndarray) else v
            for k, v in vars(self).items()
            if k not in ("t0", "before_s", "pending", "clock")
        } | {"before_s": self.elapsed()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Tally:
        tally = cls(len(state["acc_sum"]), state["total"])
        for k, v in state.items():
            setattr(tally, k, np.array(v) if k in ("acc_sum", "recent_sum") else v)
        return tally

    def history(self) -> dict[str, Any]:
        self.settle()

        def rounded(v: np.ndarray) -> list[float]:
            return [round(float(x), 4) for x in v]

        return {
            "steps": self.total,
            "train_s": round(self.elapsed(), 1),
            "tokens_per_s": round(self.tokens / max(self.step_s, 1e-9)),
            "label_tokens": self.tokens,
            "curve": self.curve,
            "validation": self.validation,
            "slot_accuracy_run": rounded(self.acc_sum / max(self.acc_n, 1)),
            "slot_accuracy_last": rounded(self.recent_sum / max(self.recent_n, 1)),
        }
