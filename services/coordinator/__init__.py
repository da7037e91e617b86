"""crossfeed coordinator service."""
