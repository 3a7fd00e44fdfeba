"""The probe's terminal view (a summary table, the per-category table, serving metrics, the first
failed requests) and the per-category lines diagnose prints after its report."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from specscope.report.context import ProbeResult, fmt_ci, precision_line
from specscope.report.terminal import render_serving
from specscope.report.text import labelled, untrusted


def _fmt(v: Any, unit: str = "", nd: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{nd}f}{unit}"
    return f"{v}{unit}"


def chunks_vs_steps_note(s: dict[str, Any]) -> str | None:
    """A line saying why the commit length and the tokens per chunk differ (when they do by
    more than 5%): the same table must not show two numbers for one idea without a reason."""
    commit, per_chunk = s.get("mean_commit_len"), s.get("tokens_per_chunk_mean")
    if (
        not isinstance(commit, float | int)
        or not isinstance(per_chunk, float | int)
        or not per_chunk
    ):
        return None
    if abs(commit - per_chunk) <= 0.05 * per_chunk:
        return None
    source = s.get("mean_commit_len_source") or "?"
    if per_chunk > commit:
        return (
            f"the server sends several verify steps per chunk (stream interval or "
            f"coalescing); the commit length ({source}) counts tokens per verify step"
        )
    return (
        f"chunks carry fewer tokens than a verify step commits (the server splits steps "
        f"over several events); the commit length ({source}) counts tokens per verify step"
    )


def category_rich_table(rows: list[dict[str, Any]]) -> Table:
    """The per-category rows of a summary as a terminal table (fits 80 columns)."""
    t = Table(
        title="by category",
        caption="commit len: tokens per verify step, all steps, from "
        "the client's steps (* from the server's figures); copied: output found in the prompt",
    )
    t.add_column("category", no_wrap=True)
    for col in ("req", "commit len", "w/o loops", "tok/s", "loops", "copied"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        star = "*" if r["commit_source"] == "server" else ""
        t.add_row(
            untrusted(r["category"]),
            str(r["requests"]),
            _fmt(r["mean_commit_len"], nd=2) + star,
            _fmt(r["mean_commit_len_without_loops"], nd=2),
            _fmt(r["decode_tps"], nd=1),
            str(r["looping_requests"]),
            "–" if r.get("copied_share") is None else f"{r['copied_share']:.0%}",
        )
    return t


def render_workload(keys: dict[str, Any], console: Console, verbose: bool = True) -> None:
    """Diagnose's workload keys after its report: commit length per category (the table, or
    folded to its range in one line), loops and prefix-cache evidence (folded: only hits)."""
    if keys["by_category"]:
        if verbose:
            console.print(category_rich_table(keys["by_category"]))
        else:
            console.print(Text(_category_range(keys["by_category"])))
    if keys["repetition_loops"]:
        console.print(
            f"repetition loops: {len(keys['repetition_loops'])} request(s) end in a "
            "loop; their acceptance is inflated",
            markup=False,
            highlight=False,
        )
    if keys["prefix_cache"] and (verbose or keys["prefix_cache"].get("hits")):
        pc = keys["prefix_cache"]
        console.print(
            f"prefix cache: {pc['hits']} hit(s) of {pc['requests']}: {pc['evidence']}",
            markup=False,
            highlight=False,
        )


def _category_range(rows: list[dict[str, Any]]) -> str:
    """The per-category table in one line: the lowest and highest commit length and where."""
    known = [r for r in rows if isinstance(r.get("mean_commit_len"), float | int)]
    if not known:
        return f"by category: {len(rows)} categories, commit length unknown (--verbose)"
    lo = min(known, key=lambda r: r["mean_commit_len"])
    hi = max(known, key=lambda r: r["mean_commit_len"])
    return (
        f"by category ({len(rows)}): commit length {lo['mean_commit_len']:.2f} "
        f"({lo['category']}) to {hi['mean_commit_len']:.2f} ({hi['category']}); --verbose: table"
    )


def _headline_rows(t: Table, o: ProbeResult) -> None:
    """The measured figures: requests, TTFT, decode tps, precision, commit length (all steps,
    then the server's drafted-steps-only figure, labelled), step time, speculation, e2e."""
    s = o.summary
    t.add_row("requests (ok / failed)", f"{s['requests']} ({s['ok']} / {s['errors']})")
    t.add_row("TTFT p50 / p99", f"{_fmt(s['ttft_s_p50'], ' s')} / {_fmt(s['ttft_s_p99'], ' s')}")
    t.add_row(
        "decode tok/s (token-weighted)",
        _fmt(s["decode_tps"], nd=1) + fmt_ci(s.get("decode_tps_ci"), 1),
    )
    if (reached := precision_line(o.precision)) is not None:
        t.add_row("precision", reached)
    t.add_row(
        "mean commit length (all steps)",
        f"{_fmt(s['mean_commit_len'], nd=2)}"
        + fmt_ci(s.get("mean_commit_len_ci"), 2)
        + (f" ({s['mean_commit_len_source']})" if s["mean_commit_len_source"] else ""),
    )
    loops = s.get("headline_loops") or {}
    if loops.get("note"):  # beside the figure it qualifies: loops dominate the commit length
        t.add_row(Text("loops dominate", style="bold yellow"), untrusted(loops["note"]))
    if s.get("mean_commit_len_per_drafted_step") is not None:
        share = s.get("drafted_step_share")
        t.add_row(
            "per drafted step (server)",
            f"{s['mean_commit_len_per_drafted_step']:.2f}"
            + (f"; {share:.0%} of steps drafted" if share is not None else "")
            + "; steps that drafted nothing are left out of the server's figure",
        )
    t.add_row(
        "mean step time",
        f"{_fmt(s['mean_step_s'] and s['mean_step_s'] * 1e3, ' ms', 2)}"
        + fmt_ci(s.get("mean_step_s_ci"), 2, 1e3, "ms")
        + (f" ({s['mean_step_s_source']})" if s["mean_step_s_source"] else ""),
    )
    client = s.get("client") or {}
    if client.get("limits_step_time"):  # beside the step time it qualifies
        t.add_row(Text("client was the limit", style="bold yellow"), client["reason"])
    if s.get("speculation"):
        t.add_row("speculation", untrusted(f"{s['speculation']}: {s['speculation_reason']}"))
    t.add_row("e2e p50 / p99", f"{_fmt(s['e2e_s_p50'], ' s')} / {_fmt(s['e2e_s_p99'], ' s')}")


def _workers_row(t: Table, client: dict[str, Any]) -> None:
    """`--workers N`: how many measured, where, their pooled loop lag, and any that was lost."""
    workers = [w for w in client.get("workers") or [] if w.get("transport")]
    if not workers:
        return
    hosts = sorted({str(w.get("host") or "?") for w in workers})
    where = "this host" if all(w.get("clock_shared") for w in workers) else ", ".join(hosts)
    text = f"{len(workers)} {workers[0]['transport']} workers on {where}"
    if client.get("lag_p99_s") is not None:
        text += f"; loop lag p99 {client['lag_p99_s'] * 1e3:.2f} ms over all their samples"
    shifted = [w for w in workers if w.get("clock_applied_s")]
    if shifted:
        worst = max(w.get("clock_uncertainty_s") or 0.0 for w in shifted)
        text += f"; {len(shifted)} clock(s) moved onto this one (within {worst * 1e3:.2f} ms)"
    t.add_row("workers", untrusted(text))
    for w in workers:
        if w.get("lost"):
            t.add_row(Text("worker lost", style="red"), untrusted(str(w["lost"])))


def _caveat_rows(t: Table, s: dict[str, Any]) -> None:
    """What qualifies the figures: chunks vs steps (and why they differ), unreliable client
    steps, errors, prefix-cache hits and repetition loops."""
    _workers_row(t, s.get("client") or {})
    t.add_row("tokens per chunk (mean)", _fmt(s["tokens_per_chunk_mean"], nd=2))
    why = chunks_vs_steps_note(s)
    if why:
        t.add_row(Text("why they differ", style="dim"), untrusted(why))
    for r in s["steps"]["unreliable_reasons"][:2]:
        t.add_row(
            Text("client steps unreliable", style="yellow"),
            untrusted(f"{r['reason']} ({r['requests']} req)"),
        )
    if s["error_kinds"]:
        t.add_row(
            Text("errors", style="red"),
            untrusted(", ".join(f"{k}: {v}" for k, v in s["error_kinds"].items())),
        )
    pc = s.get("prefix_cache")
    if pc:
        t.add_row("prefix cache hits", f"{pc['hits']} of {pc['requests']}")
    loops = s.get("repetition_loops") or []
    if loops:
        t.add_row(
            Text("repetition loops", style="yellow"),
            f"{len(loops)} request(s) end in a loop (acceptance inflated; see by category)",
        )


def render_probe(o: ProbeResult, console: Console, err_console: Console) -> None:
    """The summary table, the per-category table and serving metrics on `console`; the first
    three failed requests on `err_console`."""
    s = o.summary
    t = Table(
        title=untrusted(f"specscope probe · {o.info.endpoint} · {o.info.flavor}/{o.info.api}"),
        show_header=False,
    )
    t.add_column("metric", style="bold")
    t.add_column("value")
    _headline_rows(t, o)
    _caveat_rows(t, s)
    t.add_row("run directory", untrusted(o.run_dir))
    console.print(t)
    if s.get("by_category"):
        console.print(category_rich_table(s["by_category"]))
    if o.serving:
        render_serving(o.serving, console)
    for tr in [x for x in o.traces if x.error is not None][:3]:
        err_console.print(
            labelled(f"request {tr.index}:", "red", f"{tr.error.kind}: {tr.error.message}"),  # type: ignore[union-attr]
            highlight=False,
        )
