"""Fast parsers for the canonical shapes of the interval lines (SGLang `Decode batch`, vLLM
`SpecDecoding metrics`), used when only the summary is wanted.

Why: the general parsers split every line into `key: value` pairs (or run one regex per field),
decode and clean it and build a full field dict: ~20 us a line, the biggest cost of `--format
auto` after the DDTREE pass. Here ONE compiled bytes regex matches the whole raw line in the
shape real servers print, and only the values the summary uses are converted. A line in any
other shape (other field order, unknown fields, ANSI codes, control or non-ASCII bytes, another
timestamp or marker before the one found, `nan`/`…` values) returns None and goes through the
general parser, so the summary equals the general path's (up to the order of float additions:
identical lines are added once with their count, as fastpath.py does) — tests/test_telemetry_engines.py
checks that on real and fuzzed lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from specscope.telemetry.base import Parsed
from specscope.telemetry.commit import DRAFTED_STEPS
from specscope.telemetry.prefix import PrefixParser, _local_unix, _ranks

# A plain number as `number()` reads it (no sign, exponent, `nan` or `%`: those fall back),
# with bounded digits (400 digits would be inf, which `number()` drops).
_POS = rb"\d{1,20}(?:\.\d{1,20})?"
_NUM = rb"(" + _POS + rb")"
# Printable ASCII before the stamp, holding no other `[YYYY-` (the general prefix parser takes
# the first SGLang stamp of the line).
_PRE = rb"(?:[\x20-\x5a\x5c-\x7e]|\[(?!\d{4}-))*"
_SGLANG = re.compile(
    _PRE
    + rb"\[(\d{4})-(\d\d)-(\d\d) (\d\d:\d\d:\d\d)((?: [A-Z]+\d+)*)\] "
    + rb"(Decode batch)[.,] #running-req: (\d+), #token: \d+, token usage: \d+(?:\.\d+)?, "
    + rb"(?:accept len: " + _NUM + rb", )?(?:accept rate: " + _NUM + rb", )?"
    + rb"(?:[a-z]+ graph: (?:True|False), )?"
    + rb"gen throughput \(token/s\): " + _NUM + rb", #queue-req: (\d+)(?:, )? *"
)
_VLLM = re.compile(
    rb"[\x20-\x7e]*?(SpecDecoding metrics): Mean acceptance length: " + _NUM
    + rb", Accepted throughput: \d+(?:\.\d+)? tokens/s, Drafted throughput: \d+(?:\.\d+)? tokens/s, "
    + rb"Accepted: (\d+) tokens, Drafted: \d+ tokens, "
    + rb"Per-position acceptance rate: (" + _POS + rb"(?:, " + _POS + rb")*), "
    + rb"Avg Draft acceptance rate: " + _NUM + rb"% *"
)

# (timestamp, rank, key): the key holds every value the summary uses, so that identical lines
# are counted and added once per block (`parsed_of` turns it back into a parse result).
FastResult = tuple[float | None, str | None, tuple]
FastLine = Callable[[bytes, int, int, int], "FastResult | None"]


class FastLines:
    """The fast line parsers by format name; each takes (block, line start, line end, marker
    offset) and returns a FastResult, or None for the general parser."""

    def __init__(self, prefixes: PrefixParser) -> None:
        self.prefixes = prefixes
        self._rank: dict[bytes, str | None] = {}
        self._minutes: dict[tuple[bytes, ...], float | None] = {}
        self.by_format: dict[str, FastLine] = {
            "sglang_decode": self.sglang_decode,
            "vllm_spec": self.vllm_spec,
        }

    def _ts_of(self, y: bytes, mo: bytes, d: bytes, hms: bytes) -> float | None:
        """`_local_unix` of the stamp, its minute cached (consecutive lines share it): minute
        start + seconds is the float `_local_unix` computes."""
        minute = (y, mo, d, hms[:5])
        base = self._minutes.get(minute, -1.0)
        if base == -1.0:
            if len(self._minutes) > 100_000:
                self._minutes.clear()
            base = self._minutes[minute] = _local_unix(
                int(y), int(mo), int(d), hms[:5].decode("ascii") + ":00"
            )
        sec = int(hms[6:])
        return None if base is None or sec > 59 else base + sec

    def _rank_of(self, label: bytes) -> str | None:
        rank = self._rank.get(label, "")
        if rank == "":
            rank = self._rank[label] = _ranks(label.decode("ascii"))[0]
        return rank

    def sglang_decode(self, block: bytes, ls: int, le: int, at: int) -> FastResult | None:
        m = _SGLANG.fullmatch(block, ls, le)
        if m is None or m.start(6) != at:
            return None
        y, mo, d, hms, label, _, running, acc_len, acc_rate, gen, queue = m.groups()
        key = (
            "sglang_decode",
            None if acc_len is None else float(acc_len),
            None if acc_rate is None else float(acc_rate),
            int(running),
            float(gen),
            int(queue),
        )
        return self._ts_of(y, mo, d, hms), self._rank_of(label), key

    def vllm_spec(self, block: bytes, ls: int, le: int, at: int) -> FastResult | None:
        m = _VLLM.fullmatch(block, ls, le)
        if m is None or m.start(1) != at:
            return None
        _, mean, accepted_s, per_pos, pct = m.groups()
        mean_al = float(mean)
        key = (
            "vllm_spec",
            mean_al,
            float(pct) / 100.0,
            round(int(accepted_s) / (mean_al - 1.0)) if mean_al > 1.0 else None,
            tuple(float(v) for v in per_pos.split(b", ")),
        )
        pre = self.prefixes(block[ls:at].decode("ascii"))
        return pre.ts, pre.rank, key


def parsed_of(key: tuple) -> Parsed:
    """The summary's view (a general parser's result without ts, rank and unused fields) of
    a fast result's key."""
    if key[0] == "sglang_decode":
        _, commit, rate, running, gen, queue = key
        return {
            "format": "sglang_decode",
            "commit_len": commit,
            "accepted_drafts": None if commit is None else commit - 1.0,
            "accept_rate": rate,
            "scope": "interval",
            "fields": {"running_req": running, "gen_throughput": gen, "queue_req": queue},
        }
    _, mean_al, rate, n_steps, per_pos = key
    return {
        "format": "vllm_spec",
        "commit_len": mean_al,
        "accepted_drafts": mean_al - 1.0,
        "accept_rate": rate,
        "n_steps": n_steps,
        "per_position": list(per_pos),
        "scope": "interval",
        "fields": {"commit_len_basis": DRAFTED_STEPS},
    }
