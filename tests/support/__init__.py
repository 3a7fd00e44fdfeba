"""Helpers the tests share (not tests themselves): loopback servers that replay each flavor's
wire format on a known schedule (loopback.py), and hand-built analyses for the report tests
(reports.py)."""
