"""Host-side faults of the server in front of a backend: real mechanisms, off by default,
switched on by `specscope serve --fault NAME[=VALUE]` so that a diagnosis can be checked against
a cause known in advance (docs/faults.md says what each does and what a right diagnosis says).

Both are output processing in the step loop: after each step and before the next one, the loop
that steps the backend works on every running request's whole output so far, as a scheduler
does that renders each request's text itself to check its stops (SGLang's did before its
detokenizer became a process of its own; specscope's own server did, and drifted). So the work
sits on the step's path (`step_thread.run_step_work`): the next step waits for it, and it grows
with the output. The text the streams send is rendered apart from it, incrementally.

- `detok-full`: the whole output re-detokenized at every step (`textstream.FullTextStream`), the
  cost that once made specscope's own server drift.
- `host-per-token=US`: the whole generated text scanned for stop strings at every step, as a
  server does that checks stops on the full text, repeated so that the step's scans cost about US µs
  per token generated so far on an idle core (the cost of one scan, per call and per character,
  measured once per process): host work that grows with the output, that no engine counter sees,
  and that a loaded machine slows down as it slows the engine.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

from specscope.serve.textstream import FullTextStream, TextStream

# What a stop-string check looks for: common end-of-turn markers of chat templates.
STOP_STRINGS = ("<|im_end|>", "<|eot_id|>", "</s>", "\n\nUser:", "<|endoftext|>")


class FaultError(ValueError):
    """A --fault that names no fault or gives a bad value; the message says which."""


@dataclass(frozen=True)
class HostFaults:
    detok_full: bool = False
    host_per_token_us: float = 0.0

    @property
    def on(self) -> bool:
        """Any host fault on (the step loop then runs each request's step work)."""
        return self.detok_full or self.host_per_token_us > 0

    @property
    def names(self) -> list[str]:
        """The faults on, as `--fault` spells them (for the server's start line and /info)."""
        out = ["detok-full"] if self.detok_full else []
        if self.host_per_token_us > 0:
            out.append(f"host-per-token={self.host_per_token_us:g}")
        return out

    def step_work(self, detokenize: Callable[[list[int]], str]) -> StepWork | None:
        """One request's output processing in the step loop, with the faults that live there
        (None without a fault: the loop then does no per-request text work at all)."""
        if not self.on:
            return None
        stream = (FullTextStream if self.detok_full else TextStream)(detokenize)
        if self.host_per_token_us > 0:
            return StopScanStream(stream, self.host_per_token_us)
        return stream


HOST_FAULTS = {
    "detok-full": "re-detokenize the whole output at every step (no value)",
    "host-per-token": "scan the whole output for stop strings every step: US µs per token so far",
}


def parse_host_faults(specs: list[str]) -> tuple[HostFaults, list[str]]:
    """The host faults among `NAME[=VALUE]` specs, and the specs that are not host faults (the
    backend's to parse). Raises FaultError on a host fault with a bad value."""
    detok_full, per_token, rest = False, 0.0, []
    for spec in specs:
        name, _, value = spec.partition("=")
        if name == "detok-full":
            if value:
                raise FaultError("--fault detok-full takes no value")
            detok_full = True
        elif name == "host-per-token":
            try:
                per_token = float(value)
            except ValueError:
                raise FaultError(
                    f"--fault host-per-token=US needs µs per token, got {value!r}"
                ) from None
            if not per_token > 0:
                raise FaultError(f"--fault host-per-token=US must be > 0, got {value}")
        else:
            rest.append(spec)
    return HostFaults(detok_full, per_token), rest


@functools.cache
def scan_cost() -> tuple[float, float]:
    """(seconds per scan, seconds per character scanned) of one stop-string scan on this
    machine, measured once per process in this thread's CPU time (time spent waiting for a core
    or for the interpreter lock does not count), the fastest of several tries: a busy moment
    while measuring must not shrink the fault. The server measures at its first request, often
    while the machine is busiest; in wall time a try taken while the process waited reads high:
    once here, beside five busy loops and the fault lab's runs, 2.7x the idle cost per
    character (the fault then runs at ~40% of its size) where CPU time read the idle figure.
    `bench/scan_cost_load.py` beside 2-12 spinning processes read both at the idle figure
    (1.00-1.01: the fastest of five tries found one not preempted). The fault is an amount of
    work, not of time: on a loaded machine it slows down as the server's own steps do, so it
    shows as much."""
    return measure_scan_cost(time.thread_time)


def measure_scan_cost(clock: Callable[[], float]) -> tuple[float, float]:
    """scan_cost's measurement over `clock` (the bench compares clocks)."""

    def fastest(text: str, reps: int) -> float:
        best = float("inf")
        for _ in range(5):
            t0 = clock()
            for _ in range(reps):
                _found_stop(text)
            best = min(best, (clock() - t0) / reps)
        return best

    short, long = "word " * 8, "the step time of a speculative server, " * 2000
    t_short, t_long = fastest(short, 2000), fastest(long, 20)
    per_char = max((t_long - t_short) / (len(long) - len(short)), 0.0)
    return max(t_short - per_char * len(short), 1e-9), per_char


def _found_stop(text: str) -> bool:
    return any(s in text for s in STOP_STRINGS)


class StopScanStream:
    """A text stream whose every step scans all the text so far for stop strings, repeated to
    cost `per_token_us` µs per token generated so far (the `host-per-token` fault)."""

    def __init__(self, inner: TextStream, per_token_us: float):
        self._inner = inner
        self._per_token_s = per_token_us * 1e-6
        self._tokens = 0

    def add(self, ids: list[int], final: bool = False) -> str:
        delta = self._inner.add(ids, final)
        self._tokens += len(ids)
        text = self._inner.text
        budget = self._per_token_s * self._tokens  # what this step's scans cost on an idle core
        per_call, per_char = scan_cost()
        for _ in range(max(1, round(budget / (per_call + per_char * len(text))))):
            _found_stop(text)
        return delta

    @property
    def text(self) -> str:
        return self._inner.text


# What a host fault runs per request in the step loop (`add(ids, final)` after each step).
StepWork = TextStream | StopScanStream
