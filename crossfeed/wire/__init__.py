"""The wire contract of DESIGN.md §3: header names, topic names, Avro records."""
