"""The watch's terminal view (without --json): one line per window, alerts and errors as they
come, a summary at the end. Deliberately plain lines rather than a live-redrawn panel: a
watch runs for days in terminals, tmux panes and log files, where appended lines survive."""

from __future__ import annotations

import time
from collections import deque

from rich.console import Console
from rich.text import Text

from specscope.analysis.watch.detector import Alert, Recovery
from specscope.analysis.watch.events import Diagnosis, Start, Summary, WatchError, Window
from specscope.analysis.watch.speedup import Speedup
from specscope.report.text import untrusted
from specscope.report.watch_html import RecordedWatch, when

_BARS = "▁▂▃▄▅▆▇█"
SPARK = 24  # windows in the sparkline


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def sparkline(values: list[float]) -> str:
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = hi - lo or 1.0
    return "".join(_BARS[min(7, int((v - lo) / span * 8))] for v in values)


class WatchView:
    """Renders events on `console`; keeps the last SPARK windows' decode rates."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.rates: deque[float] = deque(maxlen=SPARK)

    def start(self, e: Start) -> None:
        canary = (
            f"a canary every {e.probe_every_s:g} s ({e.prompt_tokens} prompt + {e.max_tokens} "
            f"output tokens: at most {e.budget_tokens_per_hour:,} tokens per hour)"
            if e.probe_every_s
            else "no canary (passive only)"
        )
        self.console.print(
            Text.assemble(
                "watching ",
                untrusted(e.url),
                f": {canary}; baseline from the {e.baseline}",
                f" ({e.warmup_s:g} s); alerts at a design rate of {e.false_alarms_per_day:g} ",
                f"false alarms per 24 h for changes of {100 * (e.min_shift - 1):.0f}% or more",
                *(
                    ("; speedup against the plain run ", untrusted(e.plain_baseline.source))
                    if e.plain_baseline is not None
                    else ()
                ),
            ),
            highlight=False,
        )

    def window(self, w: Window) -> None:
        f = w.figures
        if f.decode_tps is not None:
            self.rates.append(f.decode_tps)
        parts = [_clock(w.t), f"{w.state:8}"]
        if f.mean_commit_len is not None and f.mean_commit_len_ci is not None:
            lo, hi = f.mean_commit_len_ci
            parts.append(f"{f.mean_commit_len:.2f} tok/step [{lo:.2f}, {hi:.2f}]")
        if f.mean_step_s is not None:
            parts.append(f"{1000 * f.mean_step_s:.1f} ms/step")
        if f.decode_tps is not None:
            parts.append(f"{f.decode_tps:.1f} tok/s")
        if not f.canaries:
            parts.append("no canary ended")
        parts.append(f"speculation {w.speculation}")
        if w.server and w.server.get("commit_len") is not None:
            parts.append(f"server {w.server['commit_len']:.2f} tok/step")
        if w.speedup is not None:
            parts.append(speedup_text(w.speedup))
        parts.append(sparkline(list(self.rates)))
        self.console.print("  ".join(parts), highlight=False)

    def alert(self, a: Alert) -> None:
        lo, hi = a.ci
        self.console.print(
            f"[bold red]ALERT[/] {a.factor}: x{a.ratio:.3f} [{lo:.3f}, {hi:.3f}] since "
            f"{_clock(a.since)}; {_causes(a)} ({a.reason}); run "
            "`specscope diagnose` to separate the candidates",
            highlight=False,
        )

    def recovered(self, r: Recovery) -> None:
        self.console.print(f"[green]recovered[/] {r.factor} at {_clock(r.t)}", highlight=False)

    def error(self, e: WatchError) -> None:
        self.console.print(
            Text.assemble((f"{e.source} {e.kind}: ", "yellow"), untrusted(e.message)),
            highlight=False,
        )

    def diagnosis(self, d: Diagnosis) -> None:
        where = d.run_dir or "(no run directory)"
        self.console.print(
            Text.assemble(
                f"diagnosis after the {d.factor} alert (exit {d.exit_code}, top cause "
                f"{d.cause or 'none'}, {where}): ",
                untrusted(d.message),
            ),
            highlight=False,
        )

    def summary(self, s: Summary) -> None:
        hours = (s.t - s.started) / 3600
        self.console.print(
            f"watched {hours:.2f} h: {s.windows} windows, {s.canaries} canaries "
            f"({s.canary_errors} failed), {s.errors} recorded faults, {len(s.alerts)} alerts"
            + (" (interrupted)" if s.interrupted else ""),
            highlight=False,
        )
        for a in s.alerts:
            said = a.get("cause") or " or ".join(a.get("candidates") or ()) or "unknown"
            kind = "cause" if a.get("cause") else "candidates"
            self.console.print(
                f"  alert {a['factor']} x{a['ratio']} {kind} {said}", highlight=False
            )

    def render(self, event: object) -> None:
        """Any watch event, by its type."""
        for kind, method in (
            (Start, self.start),
            (Window, self.window),
            (Alert, self.alert),
            (Recovery, self.recovered),
            (WatchError, self.error),
            (Diagnosis, self.diagnosis),
            (Summary, self.summary),
        ):
            if isinstance(event, kind):
                method(event)  # type: ignore[operator]
                return


def speedup_text(s: Speedup) -> str:
    """`speedup x0.60 [0.58, 0.62]: speculation is not paying` (or `pays`, or `cannot tell`
    when the interval straddles 1)."""
    lo, hi = s.ci
    said = {True: "pays", False: "speculation is not paying", None: "cannot tell if it pays"}
    return f"speedup x{s.value:.2f} [{lo:.2f}, {hi:.2f}]: {said[s.pays]}"


def _causes(a: Alert) -> str:
    """The cause where one is decided, else the candidates left (never a guess named as one)."""
    if a.cause:
        return f"cause {a.cause}"
    return "candidates " + " or ".join(a.candidates) if a.candidates else "cause unknown"


def render_recorded(w: RecordedWatch, console: Console) -> None:
    """A recorded watch (`specscope report` on its run directory) in a few lines: what was
    watched, how many windows, canaries, faults and alerts, then each alert. The files are read
    back from disk, so every value is shown as untrusted text."""
    summary = (w.of("summary") or [{}])[-1]
    console.print(
        Text.assemble(
            "watch of ",
            untrusted(w.options.get("url") or "-"),
            f" from {when((w.of('start') or [{}])[0].get('t'))} to {when(summary.get('t'))}: "
            f"{len(w.windows)} windows, ",
            untrusted(f"{summary.get('canaries', '-')} canaries, "),
            f"{len(w.of('error'))} recorded faults, {len(w.of('alert'))} alerts",
            "" if summary else " (no summary: the watch was killed)",
        ),
        highlight=False,
    )
    for a in w.of("alert"):
        said = a.get("cause") or " or ".join(map(str, a.get("candidates") or [])) or "unknown"
        console.print(
            Text.assemble(
                f"  {when(a.get('t'))}  alert ",
                untrusted(f"{a.get('factor')} x{a.get('ratio')} {a.get('ci')} {said}"),
            ),
            highlight=False,
        )
