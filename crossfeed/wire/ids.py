"""Consumer group ids and transactional ids: part of the wire contract. A new owner of a
task, a restarted sink and the coordinator's failover must all derive the same names, so
they are spelled here only."""

from __future__ import annotations


def puller_group(feed: str) -> str:
    """The pullers' group of a feed (task membership without a coordinator)."""
    return f"crossfeed-puller.{feed}"


def sink_group(feed: str) -> str:
    """The sinks' group of a feed: they share its staging or sorted partitions, and its
    committed offsets are where a sink resumes."""
    return f"crossfeed-sink.{feed}"


def puller_transactional_id(feed: str, task: int) -> str:
    """Fixed per task: a new owner's ``init_transactions`` fences the previous one."""
    return f"crossfeed-puller.{feed}.{task}"


def sink_transactional_id(feed: str, instance: str) -> str:
    return f"crossfeed-sink.{feed}.{instance}"


def sorter_quiet_group(feed: str) -> str:
    """The sorter's watch for a change during a quiet pause (assigned, never joined, never
    committed: its positions come from Spark's offset log each time)."""
    return f"crossfeed-sorter-quiet.{feed}"


def debezium_reader_group(feed: str) -> str:
    """Debezium input: the group whose committed offsets are the Debezium reader's positions
    in Debezium's topics (never joined: the reader assigns its partitions)."""
    return f"crossfeed-debezium.{feed}"


def debezium_reader_transactional_id(feed: str) -> str:
    """Debezium input: one Debezium reader per feed; a new one fences the previous."""
    return f"crossfeed-debezium.{feed}"
