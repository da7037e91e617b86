"""Change data capture with Debezium on Kafka Connect: the connector crossfeed needs."""
