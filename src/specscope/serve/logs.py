"""SGLang-style server log lines (formats: shared/reference/observability.md §1a, §1d).

Every line carries SGLang's prefix `[YYYY-MM-DD HH:MM:SS TP0] `, so specscope's own log parsers
read this server exactly as they read a real one.
"""

from __future__ import annotations

import itertools
import logging
import sys
from pathlib import Path

_FORMAT = "[%(asctime)s TP0] %(message)s"
_DATEFMT = "%Y-%m-%d %H:%M:%S"
_ids = itertools.count()


class ServerLog:
    """One logger per app (several servers may live in one test process)."""

    def __init__(self, log_file: Path | None = None, to_stderr: bool = True):
        self.logger = logging.getLogger(f"specscope.serve.{next(_ids)}")
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        formatter = logging.Formatter(_FORMAT, _DATEFMT)
        handlers: list[logging.Handler] = []
        if to_stderr:
            handlers.append(logging.StreamHandler(sys.stderr))
        if log_file is not None:
            handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
        for h in handlers:
            h.setFormatter(formatter)
            self.logger.addHandler(h)

    def info(self, message: str) -> None:
        self.logger.info(message)

    def decode_batch(
        self,
        running: int,
        tokens: int,
        token_usage: float,
        accept_len: float | None,
        accept_rate: float | None,
        gen_throughput: float,
        queued: int,
        cuda_graph: bool = False,  # the batch ran on CUDA graphs (SGLang prints the same)
    ) -> None:
        spec = ""
        if accept_len is not None and accept_rate is not None:
            spec = f"accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, "
        self.logger.info(
            f"Decode batch, #running-req: {running}, #token: {tokens}, "
            f"token usage: {token_usage:.2f}, {spec}cuda graph: {cuda_graph}, "
            f"gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queued}"
        )

    def ddtree_step(
        self, request_id: str, step: int, accepted_drafts: int, commit_len: int
    ) -> None:
        self.logger.info(
            f"DDTREE metrics req={request_id} step={step} "
            f"avg_accepted_drafts={accepted_drafts:.2f} avg_commit_len={commit_len:.2f}"
        )

    def close(self) -> None:
        for h in list(self.logger.handlers):
            self.logger.removeHandler(h)
            h.close()
