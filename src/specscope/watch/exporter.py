"""`--serve-metrics PORT`: the watch's own estimates for Prometheus, on loopback, from a
private registry (prometheus_client, already a dependency for reading servers' /metrics).

Names (gauges hold the last window's value, NaN when no canary ended in it):
  specscope_watch_decode_tps                    tokens/s of the canaries in the last window
  specscope_watch_commit_len                    tokens per verify step
  specscope_watch_step_seconds                  seconds per verify step
  specscope_watch_speculation                   1 on, 0 off, -1 unknown
  specscope_watch_speedup                       speculation's speedup over the plain run
  specscope_watch_speedup_lower                 ... the lower end of its 95% interval
  specscope_watch_speedup_upper                 ... and the upper end (all NaN without
                                                --plain-baseline or a reliable canary)
  specscope_watch_speculation_pays              1 the interval lies above 1, 0 below 1
                                                (not paying), -1 it straddles 1 or unknown
  specscope_watch_cusum_statistic{factor}       each factor's CUSUM statistic ...
  specscope_watch_cusum_threshold{factor}       ... and the threshold it alarms at
  specscope_watch_alerts_total{factor}          alerts raised (counter)
  specscope_watch_errors_total{source}          recorded faults (counter)
  specscope_watch_windows_total                 windows emitted (counter)"""

from __future__ import annotations

import math
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from specscope.analysis.watch.detector import Alert
from specscope.analysis.watch.events import WatchError, Window
from specscope.analysis.watch.speedup import Speedup

_SPECULATION = {"on": 1.0, "off": 0.0, "unknown": -1.0}


class Exporter:
    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        reg = CollectorRegistry()
        p = "specscope_watch_"
        self.tps = Gauge(p + "decode_tps", "Canary decode rate, last window", registry=reg)
        self.commit = Gauge(p + "commit_len", "Tokens per verify step, last window", registry=reg)
        self.step = Gauge(p + "step_seconds", "Seconds per verify step, last window", registry=reg)
        self.spec = Gauge(p + "speculation", "1 on, 0 off, -1 unknown", registry=reg)
        self.speedup = {
            part: Gauge(p + name, f"Speculation's speedup over the plain run{what}", registry=reg)
            for part, name, what in (
                ("value", "speedup", ""),
                ("lower", "speedup_lower", ", 95% lower bound"),
                ("upper", "speedup_upper", ", 95% upper bound"),
            )
        }
        self.pays = Gauge(
            p + "speculation_pays", "1 pays, 0 not paying, -1 cannot tell", registry=reg
        )
        self.stat = Gauge(p + "cusum_statistic", "CUSUM statistic", ["factor"], registry=reg)
        self.thr = Gauge(p + "cusum_threshold", "CUSUM threshold", ["factor"], registry=reg)
        self.alerts = Counter(p + "alerts", "Alerts raised", ["factor"], registry=reg)
        self.errors = Counter(p + "errors", "Recorded faults", ["source"], registry=reg)
        self.windows = Counter(p + "windows", "Windows emitted", registry=reg)
        self._server: Any
        self._server, self._thread = start_http_server(port, addr=host, registry=reg)

    def update(self, event: object) -> None:
        if isinstance(event, Window):
            f = event.figures
            for gauge, value in (
                (self.tps, f.decode_tps),
                (self.commit, f.mean_commit_len),
                (self.step, f.mean_step_s),
            ):
                gauge.set(math.nan if value is None else value)
            self.spec.set(_SPECULATION.get(event.speculation, -1.0))
            self._speedup(event.speedup)
            for factor, (value, threshold) in event.cusum.items():
                self.stat.labels(factor).set(value)
                self.thr.labels(factor).set(threshold)
            self.windows.inc()
        elif isinstance(event, Alert):
            self.alerts.labels(event.factor).inc()
        elif isinstance(event, WatchError):
            self.errors.labels(event.source).inc()

    def _speedup(self, s: Speedup | None) -> None:
        values = (math.nan,) * 3 if s is None else (s.value, *s.ci)
        for part, value in zip(("value", "lower", "upper"), values, strict=True):
            self.speedup[part].set(value)
        self.pays.set(-1.0 if s is None or s.pays is None else float(s.pays))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
