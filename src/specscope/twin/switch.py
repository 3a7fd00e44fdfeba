"""A twin that changes scenario at a known time: what `specscope watch` is checked against
(`specscope serve --backend twin --scenario healthy --switch-to seed-regression
--switch-after 90`, and the watch tests at a faster time scale).

Additive on purpose: the twin backend is untouched; this subclass only swaps the scenario it
reads before a prefill or a step once `after_s` wall seconds have passed since it was built.
Requests in flight at the switch keep their random streams and continue under the new
scenario's tables, as a server reconfigured under load would. The switch time (wall clock,
unix seconds) is kept in `switched_at_unix` and in the served info (`extra.switched_at_unix`),
so a test can tell the alerts before it from those after it."""

from __future__ import annotations

import time
from pathlib import Path

from specscope.backend import BatchStep, SamplingParams
from specscope.twin.backend import TwinBackend
from specscope.twin.scenario import Scenario


class SwitchingTwinBackend(TwinBackend):
    """A TwinBackend that serves `first`, then `then` from `after_s` seconds on."""

    def __init__(
        self, first: Scenario, then: Scenario, after_s: float, truth_file: Path | None = None
    ) -> None:
        if after_s < 0:
            raise ValueError(f"switch after must be >= 0 seconds, got {after_s}")
        super().__init__(first, truth_file)
        self._then = then.scaled(first.time_scale)
        self.switch_at = time.perf_counter() + after_s
        self.switch_at_unix = time.time() + after_s
        self.switched_at_unix: float | None = None
        self.info.extra["switch_to"] = then.name
        self.info.extra["switch_at_unix"] = self.switch_at_unix

    def _maybe_switch(self) -> None:
        if self.switched_at_unix is None and time.perf_counter() >= self.switch_at:
            self.scenario = self._then
            self._verified = self._then.acceptance.verified_tokens
            self.switched_at_unix = time.time()
            self.info.extra["scenario"] = self._then.name
            self.info.extra["switched_at_unix"] = self.switched_at_unix

    async def prefill(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> None:
        self._maybe_switch()
        await super().prefill(request_id, prompt_ids, params)

    async def step(self, request_ids: list[str]) -> BatchStep:
        self._maybe_switch()
        return await super().step(request_ids)
