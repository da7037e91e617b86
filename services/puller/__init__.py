"""crossfeed puller service."""
