"""An OpenAI-compatible HTTP front over a Backend; emits the telemetry real servers emit.

Never imports the measuring side (probe, analysis): it is the thing being measured.
"""
