"""The methodology as code: two_point, full_generation, context_sweep, output_sweep,
concurrency_sweep. Each module builds a `Plan` (bounded, stated before it runs); the `Executor`
sends it to a `Target` and appends every finished request to one run dir. Nothing prints."""

from specscope.experiments.executor import ExecutionResult, Executor, Progress
from specscope.experiments.plan import Plan, PlanStep, SkippedPoint
from specscope.experiments.target import Target

__all__ = ["ExecutionResult", "Executor", "Plan", "PlanStep", "Progress", "SkippedPoint", "Target"]
