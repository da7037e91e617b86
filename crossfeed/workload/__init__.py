"""Test workloads (``crossfeed workload ...``): pure generators apart from their I/O."""
