"""crossfeed sorter service."""
