"""Disaster recovery of database feeds: switchover and failback (docs/disaster-recovery.md)."""
