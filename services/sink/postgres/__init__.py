"""The PostgreSQL sink of ordered feeds."""
