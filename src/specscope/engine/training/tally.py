"""What a training run records as it goes, and carries across a stop and `--resume`.

The loss curve (the mean over each logging window, with the window's training tokens/s: label
slots, anchors x (B-1), per second of training steps), per-slot accuracy over the whole run and
over its last tenth, and the held-out points. Its state is plain JSON (checkpoint.py stores it)
and its clock adds up the calls of a resumed run, so the card of a run that stopped and resumed
reads like one run's.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np


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

    def elapsed(self) -> float:
        return self.before_s + time.perf_counter() - self.t0

    def accuracy(self, step: int, acc: np.ndarray) -> None:
        """Per-slot accuracy of each sequence [G, B-1] of (0-based) `step`."""
        self.acc_sum += acc.sum(0)
        self.acc_n += len(acc)
        if step >= self.total - max(1, self.total // 10):
            self.recent_sum += acc.sum(0)
            self.recent_n += len(acc)

    def step(self, step: int, loss: float, lr: float, tokens: int, seconds: float, every: int, log):
        """(1-based) `step`: its loss, label slots and seconds; a curve point every `every`
        steps and at the end."""
        self.window.append(loss)
        self.window_tokens += tokens
        self.window_s += seconds
        self.tokens += tokens
        self.step_s += seconds
        if step % every == 0 or step == self.total:
            point = {
                "step": step,
                "loss": round(float(np.mean(self.window)), 4),
                "lr": lr,
                "elapsed_s": round(self.elapsed(), 1),
                "tokens_per_s": round(self.window_tokens / max(self.window_s, 1e-9)),
            }
            self.curve.append(point)
            log(f"train: {point} slot-1 acc (run mean) {self.acc_sum[0] / max(self.acc_n, 1):.3f}")
            self.window, self.window_tokens, self.window_s = [], 0, 0.0

    def state(self) -> dict[str, Any]:
        """JSON for a checkpoint."""
        return {
            k: v.tolist() if isinstance(v, np.ndarray) else v
            for k, v in vars(self).items()
            if k not in ("t0", "before_s")
        } | {"before_s": self.elapsed()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Tally:
        tally = cls(len(state["acc_sum"]), state["total"])
        for k, v in state.items():
            setattr(tally, k, np.array(v) if k in ("acc_sum", "recent_sum") else v)
        return tally

    def history(self) -> dict[str, Any]:
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
