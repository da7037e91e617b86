"""Test infrastructure: the two real clusters, and helpers to drive them."""
