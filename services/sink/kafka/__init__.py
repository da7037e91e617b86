"""The Kafka sink of ordered feeds: the sorted stream into one target topic."""
