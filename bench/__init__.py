"""Benchmarks (figures, never pass/fail): run them as modules from the repository root."""
