"""Active-active pairs of PostgreSQL databases (docs/active-active.md)."""
