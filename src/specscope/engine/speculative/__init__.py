"""Speculative decoding for the engine: drafters, draft trees (DDTree), verification rules,
and the stepper that runs draft -> build -> one target verify -> accept -> commit."""
