"""Helpers the tests share (not tests themselves): loopback servers that replay each flavor's
wire format on a known schedule (loopback.py), hand-built analyses for the report tests
(reports.py), the real CLI in a child process (cli.py) and the engine's test driver (engine.py)."""
