"""Statistical fits and tests over step tables: acceptance shape, the step-time model, significance tests."""
