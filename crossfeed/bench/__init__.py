"""Benchmarks (``make bench``): measured side by side on the local stack, never timed in tests."""
