"""What a server says about one request's verify steps, checked against the stream. Pure: no I/O.

Server data is evidence, not truth. Two shapes were measured on real servers
(reference/vllm-cpu.md §7):
- vLLM's `per_step_accepted` lists only the steps that drafted something: a step where the
  n-gram found no match is a plain one-token step and is missing (from `num_spec_steps`,
  `mean_acceptance_length` and the histogram too). Its figures are per *drafted* step.
- vLLM counts the drafts it accepted on the last step even where `max_tokens` cut the step
  short (5 for a final chunk of 1-2 tokens).

So a per-step list is checked against what the stream delivered (tokens after the first chunk):
after capping the last step at the tokens left, a list whose tokens add up to the stream's
covers every step; one that falls short by m tokens left out m one-token steps (it covers
drafted steps only); one that exceeds it over-counts, and the server is the side that is wrong.
The client's reconstruction, when there is one, is compared with the result and the verdict
names the side that is wrong and why.

Per-request summaries (no per-step list) have a basis too: SGLang's `spec_verify_ct` /
`spec_accept_length` count every verify step; llama.cpp's timings are turned into all-steps
figures when read; vLLM's `num_spec_steps` / `mean_acceptance_length` count drafted steps only
and become all-steps figures with the stream's token count (steps = tokens - accepted drafts).
"""

from __future__ import annotations

from dataclasses import dataclass

from specscope.trace.model import RequestTrace, ServerSpecFields

EVERY_STEP = "every_step"
DRAFTED_STEPS = "drafted_steps"
INCONSISTENT = "inconsistent"

#: Per-request field sources whose counts cover drafted steps only.
DRAFTED_ONLY_SOURCES = frozenset({"vllm.metrics"})
#: Client and server steps agree when at least this share of aligned steps is equal.
AGREEMENT_SHARE = 0.9
#: Client and server mean commit lengths of the same steps more than this far apart disagree.
#: Both count the same steps, so they should agree to rounding; 5% leaves room for the
#: convention that counts the prefill token in `completion_tokens / verify_ct` (3% at 32 tokens).
DISAGREEMENT = 0.05


def stream_decode_tokens(trace: RequestTrace) -> int:
    """Tokens the stream delivered after its first token-bearing chunk (that chunk carries the
    token sampled from prefill, which is no verify step)."""
    first = next((c.n_tokens for c in trace.chunks if c.n_tokens > 0), 0)
    total = (
        trace.completion_tokens if trace.completion_tokens is not None else trace.tokens_received
    )
    return max(int(total) - first, 0)


@dataclass(frozen=True)
class ServerStepCheck:
    """A server per-step list after the cross-check with the stream (and the client)."""

    commits: tuple[int, ...]  # per listed step, bonus included, the last step capped
    covers: str  # EVERY_STEP | DRAFTED_STEPS | INCONSISTENT
    stream_tokens: int
    listed_tokens: int  # as the server reported them, before the cap
    missing_steps: int  # one-token steps the list leaves out (DRAFTED_STEPS)
    capped_last: tuple[int, int] | None  # (reported, kept) commit of the last step
    client_steps: int | None  # steps in the client's reconstruction, when it had any
    client_agrees: bool  # the client's steps are the server's (with the missing ones) exactly
    verdict: str

    @property
    def all_steps(self) -> int:
        return len(self.commits) + self.missing_steps

    @property
    def drafted_steps(self) -> int:
        return len(self.commits)

    @property
    def mean_commit_len(self) -> float | None:
        """Over every step (the listed ones plus the one-token steps left out)."""
        n = self.all_steps
        return (sum(self.commits) + self.missing_steps) / n if n else None

    @property
    def mean_commit_len_per_drafted_step(self) -> float | None:
        return sum(self.commits) / len(self.commits) if self.commits else None


def _is_subsequence_with_ones(server: list[int], client: list[int]) -> bool:
    """The server's steps are the client's with some one-token steps left out (greedy match:
    a client step equal to the next server step is taken, a one-token step may be skipped)."""
    j = 0
    for c in client:
        if j < len(server) and c == server[j]:
            j += 1
        elif c != 1:
            return False
    return j == len(server)


def _heads(server: list[int], hidden: int) -> list[int]:
    """Where the client's steps may start in the server's list: after any leading server steps
    whose tokens fit in the `hidden` ones (events in the prefill chunk's read, not timed)."""
    heads = [0]
    total = 0
    for c in server:
        total += c
        if total > hidden:
            break
        heads.append(heads[-1] + 1)
    return heads


def _aligns(server: list[int], client: list[int], hidden: int) -> bool:
    """The server's drafted steps are the client's steps with one-token steps left out."""
    return any(_is_subsequence_with_ones(server[j:], client) for j in _heads(server, hidden))


def _kept_last_commit(
    commits: list[int], client: list[int] | None, excess: int, hidden: int, cut_by_max_tokens: bool
) -> int:
    """What the last listed step committed, given that vLLM counts drafts accepted past
    max_tokens on a request's last step.

    The list's last step is the request's last step only when that step drafted something; a
    final one-token step is not listed, and then nothing is to be cut. Token sums alone cannot
    tell the two apart (steps left out and tokens over-counted cancel), so the client's steps
    decide where they line up with the list: uncut, the listed steps are the client's with
    one-token steps left out; cut, the last listed step is the client's last. Where neither
    lines up (a read merged steps), a last client step of several tokens must have drafted (an
    undrafted step commits one), so the list's last step is it; one token says nothing, and the
    list stays as reported beyond what the sums force."""
    last = commits[-1]
    floor = last - excess if excess > 0 else last  # the sums force at least this much off
    cut = client[-1] if client and cut_by_max_tokens and client[-1] < last else None
    if cut is None or cut > floor:
        return floor
    if excess <= 0 and _aligns(commits, client, hidden):
        return last
    if _aligns([*commits[:-1], cut], client, hidden):
        return cut
    return cut if cut > 1 else floor


def _agreement(
    server: list[int], client: list[int], covers: str, hidden: int, all_steps: int
) -> tuple[bool, str]:
    """Whether the client's steps are the server's (after the leading steps of `hidden` tokens
    the client could not see), and a tally for the verdict."""
    heads = _heads(server, hidden)
    if covers == EVERY_STEP:
        best = max(sum(a == b for a, b in zip(client, server[j:], strict=False)) for j in heads)
        return best >= AGREEMENT_SHARE * max(len(client), 1), f" ({best}/{len(client)} equal)"
    ok = any(_is_subsequence_with_ones(server[j:], client) for j in heads)
    return ok, f" ({len(client)} steps, {len(server)} of {all_steps} drafted)"


def _cap_last(
    commits: list[int],
    client: list[int] | None,
    stream_tokens: int,
    cut_by_max_tokens: bool,
) -> tuple[int, int] | None:
    """(listed, kept) when the last listed step is cut to what the stream kept of it (a step
    max_tokens cut short, or one that overhangs the stream): `commits` is changed in place so
    that the totals can be compared."""
    listed = sum(commits)
    capped: tuple[int, int] | None = None
    if commits:
        hidden_tokens = max(stream_tokens - sum(client), 0) if client else 0
        keep = _kept_last_commit(
            commits, client, listed - stream_tokens, hidden_tokens, cut_by_max_tokens
        )
        if 1 <= keep < commits[-1]:
            capped = (commits[-1], keep)
            commits[-1] = keep
    return capped


def _coverage(commits: list[int], covers: str, missing: int, capped: tuple[int, int] | None) -> str:
    """What the server's list covers, in words: the part every verdict states."""
    all_steps = len(commits) + missing
    if covers == EVERY_STEP:
        what = f"the server's {len(commits)} steps cover every streamed token"
    else:
        what = (
            f"the server lists {len(commits)} steps that drafted something; the other {missing} "
            f"streamed tokens came from one-token steps it leaves out ({all_steps} steps in all)"
        )
    if capped:
        what += f"; its last step says {capped[0]} tokens where max_tokens left {capped[1]}"
    return what


def _client_verdict(
    commits: list[int],
    client: list[int],
    covers: str,
    stream_tokens: int,
    all_steps: int,
    what: str,
) -> tuple[bool, str]:
    """(agrees, verdict): the client's steps against the server's, and by the step counts which
    side misreads steps when they do not line up."""
    n_client = len(client)
    agrees = False
    # tokens the client's steps leave out: events that arrived in the prefill chunk's read
    # (not timed, so not steps there); each of those tokens is at most one server step
    hidden = max(stream_tokens - sum(client), 0)
    lo = all_steps - hidden
    if lo <= n_client <= all_steps:
        agrees, tally = _agreement(commits, client, covers, hidden, all_steps)
        if hidden:
            tally += f"; the first read held {hidden} more tokens"
        verdict = (
            f"client steps agree with the server's{tally}: {what}"
            if agrees
            else f"client steps disagree with the server's{tally}: same steps, different commit "
            f"lengths, so one side misreads steps: {what}"
        )
    elif n_client < lo:
        verdict = (
            f"client reconstruction disagrees with the server: {n_client} client steps for "
            f"{all_steps}, so the client's chunks merge steps (the client is the side that is "
            f"wrong): {what}"
        )
    else:
        verdict = (
            f"client reconstruction disagrees with the server: {n_client} client steps for "
            f"{all_steps}, so the client's chunks split steps or the server's list leaves out "
            f"more than one-token steps: {what}"
        )
    return agrees, verdict


def check_server_steps(
    accepted: list[int],
    stream_tokens: int,
    client_commits: list[int] | None = None,
    *,
    cut_by_max_tokens: bool = False,
) -> ServerStepCheck:
    """Cross-check a server's accepted-drafts-per-step list with the stream's token count and,
    when given, the client's commit lengths (in order). `cut_by_max_tokens`: the request ended
    at max_tokens, so its last step may have been cut short."""
    commits = [a + 1 for a in accepted]
    listed = sum(commits)
    client = list(client_commits) if client_commits else None
    capped = _cap_last(commits, client, stream_tokens, cut_by_max_tokens)
    short = stream_tokens - sum(commits)
    n_client = len(client) if client is not None else None

    if short < 0:
        covers, missing = INCONSISTENT, 0
        verdict = (
            f"the server lists {listed} tokens over {len(commits)} steps but the stream delivered "
            f"{stream_tokens} after the first chunk: more than a last step cut by max_tokens "
            "explains, so the server's per-step list is wrong (the stream's usage counts are what "
            "the client received)"
        )
        return ServerStepCheck(
            tuple(commits), covers, stream_tokens, listed, missing, capped, n_client, False, verdict
        )
    covers, missing = (EVERY_STEP, 0) if short == 0 else (DRAFTED_STEPS, short)
    all_steps = len(commits) + missing
    agrees = False
    what = _coverage(commits, covers, missing, capped)
    if client is None:
        verdict = what + "; no client steps to compare"
        return ServerStepCheck(
            tuple(commits),
            covers,
            stream_tokens,
            listed,
            missing,
            capped,
            n_client,
            agrees,
            verdict,
        )
    agrees, verdict = _client_verdict(commits, client, covers, stream_tokens, all_steps, what)
    return ServerStepCheck(
        tuple(commits), covers, stream_tokens, listed, missing, capped, n_client, agrees, verdict
    )


@dataclass(frozen=True)
class ServerCommit:
    """One request's commit length according to its server fields, as an all-steps figure."""

    steps: float  # every verify step (drafted or not)
    tokens: float  # tokens those steps committed
    per_drafted_step: float | None  # the server's drafted-steps-only figure, when that is its basis
    drafted_steps: float | None  # steps that drafted something, when known
    source: str

    @property
    def mean_commit_len(self) -> float | None:
        return self.tokens / self.steps if self.steps > 0 else None


def drafted_only(fields: ServerSpecFields) -> bool:
    """Whether this server's per-request counts cover only steps that drafted something."""
    return fields.source in DRAFTED_ONLY_SOURCES


def server_commit(trace: RequestTrace, check: ServerStepCheck | None = None) -> ServerCommit | None:
    """The server's view of one request as an all-steps commit length, or None when its fields
    do not say (a per-step list that failed the cross-check says nothing trustworthy)."""
    f = trace.server_spec
    if f is None:
        return None
    src = f.source or "server per-request fields"
    tokens = stream_decode_tokens(trace)
    if check is not None:
        if check.covers == INCONSISTENT or not check.all_steps:
            return None
        per_drafted = check.mean_commit_len_per_drafted_step if check.missing_steps else None
        return ServerCommit(
            float(check.all_steps),
            float(sum(check.commits) + check.missing_steps),
            per_drafted,
            float(check.drafted_steps),
            f"{src} per-step list",
        )
    if drafted_only(f):
        # steps = tokens - accepted drafts: every step commits one token plus what it accepted
        if f.accepted_drafts is None or tokens <= 0 or f.accepted_drafts >= tokens:
            return None
        steps = float(tokens - f.accepted_drafts)
        per = f.accept_length
        if per is None and f.verify_ct:
            per = (f.verify_ct + f.accepted_drafts) / f.verify_ct
        return ServerCommit(
            steps,
            float(tokens),
            per,
            float(f.verify_ct) if f.verify_ct else None,
            f"{src} (drafted steps) + stream token count",
        )
    mean = all_steps_mean_commit_len(f, trace.completion_tokens)
    if mean is None or tokens <= 0:
        return None
    return ServerCommit(tokens / mean, float(tokens), None, None, src)


def all_steps_mean_commit_len(f: ServerSpecFields, completion_tokens: int | None) -> float | None:
    """Tokens per verify step from fields that count every step (SGLang, llama.cpp timings as
    read), bonus token included: the accept length, else completion tokens over the verify
    count, else the histogram's mean."""
    if f.accept_length is not None and f.accept_length > 0:
        return f.accept_length
    if f.verify_ct and completion_tokens:
        return completion_tokens / f.verify_ct
    if f.accept_histogram and sum(f.accept_histogram) > 0:
        h = f.accept_histogram
        return sum((k + 1) * v for k, v in enumerate(h)) / sum(h)
    return None
