"""Pure functions over traces and telemetry; no I/O here: callers load runs and pass them in.

The public face: `analyze` (a run, optionally against a baseline -> `Analysis`), `summarize`
(probe's summary of a run's requests), the output model, and the rule cards that list what a
diagnosis can conclude. Inside, one folder per concept, each importing only those before it:
`steps` (verify steps from a stream, the server's own steps, whether it drafts) and `fits`
(acceptance shape, step-time model, significance tests) import nothing of analysis;
`headline` (the measured run, tps = commit length / step time, intervals, precision) builds on
them; `workload` (by category, repetition, prefix cache, routing) on headline and steps;
`diagnosis` (facts -> rule cards -> findings, series, breakeven) on all of them.
"""

from specscope.analysis.diagnosis.cards import CARDS, Cause, RuleCard
from specscope.analysis.diagnosis.diagnose import analyze
from specscope.analysis.result import Analysis, Attribution, Finding, FindingTest, Interval
from specscope.analysis.summary import summarize

__all__ = [
    "CARDS",
    "Analysis",
    "Attribution",
    "Cause",
    "Finding",
    "FindingTest",
    "Interval",
    "RuleCard",
    "analyze",
    "summarize",
]
