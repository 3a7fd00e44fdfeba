"""specscope.telemetry"""
