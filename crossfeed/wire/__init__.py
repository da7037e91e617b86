"""The wire contract of docs/design.md: header names, topic names, Avro records."""
