"""The local stack: two single-node KRaft clusters and a PostgreSQL instance on loopback."""
