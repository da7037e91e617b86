"""crossfeed sink service."""
