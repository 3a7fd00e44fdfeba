"""The workload's view: commit length by prompt category, repetition, prefix-cache hits, routing."""
