"""``crossfeed demo``: replicate, lose dc-a, fail the consumers over (see scenario.py)."""
