"""Thin wrappers over confluent-kafka: typed constructors with crossfeed's defaults."""
