"""The Grafana dashboard shipped for `specscope watch --serve-metrics` (docs/grafana/
specscope-watch.json, docs/watch.md): every PromQL expression in it, panels and template
variables alike, names only metrics a real exporter serves, groups and labels its legend by
labels those metrics carry, and every metric the exporter serves has a panel. The served names
come from scraping a live exporter fed real events, never from a list kept here."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from support.watch_exporter import example_events, scrape_after

DASHBOARD = Path(__file__).resolve().parents[1] / "docs" / "grafana" / "specscope-watch.json"
# Labels Prometheus itself attaches to every scraped series (target labels).
TARGET_LABELS = {"job", "instance"}
NAME = re.compile(r"\bspecscope_[a-zA-Z0-9_:]+")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
LEGEND = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")
SELECTOR_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")


def _served() -> dict[str, set[str]]:
    """Sample name -> its label names, scraped from a real exporter after a window (both
    factors' CUSUMs, a speedup), an alert and an error."""
    text = scrape_after(example_events())
    served: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            served.setdefault(sample.name, set()).update(sample.labels)
    return served


def _expressions(dashboard: dict) -> list[str]:
    """Every PromQL expression: the panels' targets and the template variables' queries."""
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def _problems(dashboard: dict, served: dict[str, set[str]]) -> list[str]:
    """What in the dashboard does not match what the exporter serves (empty: all match)."""
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr, legend = target["expr"], target.get("legendFormat", "")
            names = NAME.findall(expr)
            labels = set().union(*(served.get(n, set()) for n in names)) | TARGET_LABELS
            used = {x.strip() for g in GROUPING.findall(expr) for x in g.split(",") if x.strip()}
            used |= set(LEGEND.findall(legend)) | set(SELECTOR_LABEL.findall(expr))
            if not names:
                out.append(f"{panel['title']}: {expr!r} names no specscope metric")
            out += [f"{panel['title']}: label {x!r} not on {names}" for x in used - labels]
    for expr in _expressions(dashboard):
        out += [f"{expr!r}: {n} is not served" for n in NAME.findall(expr) if n not in served]
        if expr.count("(") != expr.count(")") or expr.count("{") != expr.count("}"):
            out.append(f"{expr!r}: unbalanced brackets")
    return out


def test_every_expression_names_only_what_the_exporter_serves():
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    served = _served()
    assert _problems(dashboard, served) == []
    used = {n for e in _expressions(dashboard) for n in NAME.findall(e)}
    unplotted = {n for n in served if not n.endswith("_created")} - used
    assert not unplotted, f"served but on no panel: {sorted(unplotted)}"


def test_the_check_catches_a_wrong_name_and_a_wrong_label():
    served = _served()
    bad = {
        "panels": [
            {"title": "a", "targets": [{"expr": "specscope_watch_acceptance", "legendFormat": ""}]},
            {"title": "b", "targets": [{"expr": "sum by (pod) (specscope_watch_commit_len)"}]},
            {"title": "c", "targets": [{"expr": "specscope_watch_alerts", "legendFormat": ""}]},
        ]
    }
    problems = _problems(bad, served)
    assert any("specscope_watch_acceptance is not served" in p for p in problems)
    assert any("label 'pod'" in p for p in problems)
    assert any("specscope_watch_alerts is not served" in p for p in problems)  # counters: _total


def test_the_dashboard_is_importable_grafana_json():
    d = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert d["uid"] and d["title"] and d["schemaVersion"] >= 30
    assert [i["pluginId"] for i in d["__inputs"]] == ["prometheus"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in d["panels"]:
        assert p["datasource"]["uid"] == "${DS_PROMETHEUS}" and p["targets"], p["title"]
        assert {"x", "y", "w", "h"} <= set(p["gridPos"])
