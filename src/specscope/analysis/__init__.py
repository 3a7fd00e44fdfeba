"""Pure functions over traces and telemetry: steps, decomposition, step-time model, acceptance,
findings. No I/O here: callers load runs and pass them in."""
