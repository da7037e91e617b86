"""The Kafka calls offset translation makes: admin requests and bounded reads.

Every call has a short timeout and raises :class:`Unreachable` when the cluster does not
answer in time, so a translator facing a lost data center goes on with what it knows
instead of hanging (the coordinator's lease must keep ticking).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from crossfeed.kafka import clients
from crossfeed.translation.scan import RangeScan, Seen, summarize

log = logging.getLogger(__name__)

TIMEOUT_S: Final = 5.0
QUIET_CONF: Final = {"logger": clients.QUIET, "socket.connection.setup.timeout.ms": 2000}
"""Clients on a cluster that may be lost: crossfeed logs reachability itself, once."""

TP = tuple[str, int]


_ADMINS: dict[tuple[tuple[tuple[str, str], ...], bool], AdminClient] = {}
_ADMINS_LOCK = threading.Lock()


def shared_admin(conf: Mapping[str, Any], *, quiet: bool = False) -> AdminClient:
    """The process's one AdminClient for a cluster configuration (``quiet``: for a cluster
    that may be lost, see QUIET_CONF).

    Admin futures are completed on librdkafka's background thread; an admin client whose
    last reference goes away there is destroyed on that thread, which aborts the process.
    Short-lived admin clients risk exactly that, so the translator keeps these for good.
    """
    key = (tuple(sorted((str(k), str(v)) for k, v in conf.items() if k != "logger")), quiet)
    with _ADMINS_LOCK:
        admin = _ADMINS.get(key)
        if admin is None:
            admin = clients.admin(dict(conf), **(QUIET_CONF if quiet else {}))
            _ADMINS[key] = admin
        return admin


class Unreachable(Exception):
    """The cluster did not answer in time (or refused the request)."""


def _result(future: Any, timeout_s: float, what: str) -> Any:
    try:
        return future.result(timeout=timeout_s)
    except KafkaException as err:
        raise Unreachable(f"{what}: {err.args[0].str() if err.args else err}") from None
    except Exception as err:  # concurrent.futures.TimeoutError and friends
        raise Unreachable(f"{what}: {type(err).__name__} {err}") from None


def list_groups(admin: AdminClient, timeout_s: float = TIMEOUT_S) -> list[str]:
    """Every consumer group id the cluster knows."""
    result = _result(
        admin.list_consumer_groups(request_timeout=timeout_s), timeout_s + 1, "list groups"
    )
    if result.errors:
        # A partial listing (a broker did not answer) would make known groups look gone.
        raise Unreachable(f"list groups: {result.errors[0]}")
    return sorted(g.group_id for g in result.valid)


def group_offsets(
    admin: AdminClient, groups: Iterable[str], timeout_s: float = TIMEOUT_S
) -> dict[str, dict[TP, int]]:
    """Committed offsets of each group (stable: pending transactional commits included
    once committed). The admin API takes one group per request; they run concurrently."""
    futures = {
        group: admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], require_stable=True, request_timeout=timeout_s
        )[group]
        for group in groups
    }
    out: dict[str, dict[TP, int]] = {}
    for group, future in futures.items():
        listing = _result(future, timeout_s + 1, f"offsets of group {group!r}")
        out[group] = {
            (tp.topic, tp.partition): tp.offset
            for tp in listing.topic_partitions or []
            if tp.offset >= 0 and tp.error is None
        }
    return out


def _spec(name: str, *args: int) -> Any:
    """An ``OffsetSpec`` (its constructors are untyped)."""
    return getattr(OffsetSpec, name)(*args)


def _list_offsets(
    admin: AdminClient, tps: Iterable[TP], spec: Any, timeout_s: float, what: str
) -> dict[TP, tuple[int, int]]:
    request = {TopicPartition(t, p): spec for t, p in tps}
    if not request:
        return {}
    futures = admin.list_offsets(
        request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout_s
    )
    out: dict[TP, tuple[int, int]] = {}
    for tp, future in futures.items():
        try:
            info = future.result(timeout=timeout_s + 1)
        except KafkaException as err:
            code = err.args[0].code() if err.args else None
            if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                continue  # the topic is gone: nothing to say about it
            raise Unreachable(f"{what} of {tp.topic}/{tp.partition}: {err}") from None
        except Exception as err:
            raise Unreachable(f"{what} of {tp.topic}/{tp.partition}: {err}") from None
        out[(tp.topic, tp.partition)] = (info.offset, info.timestamp)
    return out


def end_offsets(
    admin: AdminClient, tps: Iterable[TP], timeout_s: float = TIMEOUT_S
) -> dict[TP, int]:
    """Last stable offset of each partition (what a read_committed reader can reach)."""
    found = _list_offsets(admin, tps, _spec("latest"), timeout_s, "end offset")
    return {tp: offset for tp, (offset, _) in found.items()}


def start_offsets(
    admin: AdminClient, tps: Iterable[TP], timeout_s: float = TIMEOUT_S
) -> dict[TP, int]:
    """Log start offset of each partition."""
    found = _list_offsets(admin, tps, _spec("earliest"), timeout_s, "start offset")
    return {tp: offset for tp, (offset, _) in found.items()}


def max_timestamps(
    admin: AdminClient, tps: Iterable[TP], timeout_s: float = TIMEOUT_S
) -> dict[TP, int]:
    """Newest record timestamp of each partition (-1 when empty)."""
    found = _list_offsets(admin, tps, _spec("max_timestamp"), timeout_s, "max timestamp")
    return {tp: ts for tp, (_, ts) in found.items()}


def offset_for_time(
    admin: AdminClient, tp: TP, timestamp_ms: int, timeout_s: float = TIMEOUT_S
) -> int:
    """First offset whose timestamp is >= ``timestamp_ms``; the end offset if none is."""
    found = _list_offsets(
        admin, [tp], _spec("for_timestamp", timestamp_ms), timeout_s, "offset for time"
    )
    offset = found.get(tp, (-1, -1))[0]
    if offset >= 0:
        return offset
    return end_offsets(admin, [tp], timeout_s).get(tp, 0)


def active_members(
    admin: AdminClient, groups: Iterable[str], timeout_s: float = TIMEOUT_S
) -> dict[str, int]:
    """Members of each group right now (0 for an empty or unknown group)."""
    wanted = list(groups)
    if not wanted:
        return {}
    futures = admin.describe_consumer_groups(wanted, request_timeout=timeout_s)
    return {
        group: len(_result(future, timeout_s + 1, f"describe group {group!r}").members)
        for group, future in futures.items()
    }


def commit_group_offsets(
    admin: AdminClient, group: str, offsets: Mapping[TP, int], timeout_s: float = TIMEOUT_S
) -> None:
    """Set a group's committed offsets (Kafka refuses while the group has members)."""
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
    )
    future = admin.alter_consumer_group_offsets([request], request_timeout=timeout_s)[group]
    result = _result(future, timeout_s + 1, f"commit offsets of group {group!r}")
    failed = [
        f"{tp.topic}/{tp.partition}: {tp.error}" for tp in result.topic_partitions if tp.error
    ]
    if failed:
        raise Unreachable(f"commit offsets of group {group!r}: {'; '.join(failed)}")


class RangeReader:
    """Bounded reads of one cluster, read_committed, with an assign-only consumer."""

    def __init__(self, conf: Mapping[str, Any], name: str = "translator") -> None:
        self._consumer = clients.consumer(
            dict(conf),
            **QUIET_CONF,
            **{
                "group.id": f"crossfeed-{name}-reader",  # never joined: assign only
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 20,
            },
        )

    def close(self) -> None:
        self._consumer.close()

    def bounds(self, topic: str, partition: int, timeout_s: float = 2.0) -> tuple[int, int]:
        """(log start, last stable offset) of one partition."""
        try:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s
            )
        except KafkaException as err:
            raise Unreachable(f"watermarks of {topic}/{partition}: {err}") from None
        return int(low), int(high)

    def scan(
        self,
        topic: str,
        partition: int,
        start: int,
        end: int,
        limit: int,
        classify: Callable[[Any], Seen],
        budget_s: float = 3.0,
    ) -> tuple[RangeScan, bool]:
        """Read ``[start, end)`` (at most ``limit`` records, ``budget_s`` seconds).

        Returns the scan and whether it is *stable*: it lies wholly below the last stable
        offset, so later reads would give the same answer (a scan that reached the end of
        the partition covers the range up to ``end`` only "as of now").
        """
        low, high = self.bounds(topic, partition)
        reach = min(end, high)
        if start >= reach:
            # Nothing committed in [start, end) yet (or ever, when end <= high).
            return summarize(start, end, end if end > high else max(start, end), ()), end <= high
        tp = TopicPartition(topic, partition, max(start, low))
        seen: list[Seen] = []
        scanned_to = start
        done = False
        deadline = time.monotonic() + budget_s
        self._consumer.assign([tp])
        try:
            while not done and len(seen) < limit and time.monotonic() < deadline:
                batch: list[Any] = self._consumer.consume(min(500, limit - len(seen)), timeout=0.2)
                for msg in batch:
                    err = msg.error()
                    if err is not None:
                        done = done or err.code() == KafkaError._PARTITION_EOF
                        continue
                    if msg.offset() >= reach:
                        done = True
                        break
                    seen.append(classify(msg))
                    scanned_to = msg.offset() + 1
                    if len(seen) >= limit:
                        break
        except KafkaException as err:
            raise Unreachable(f"read {topic}/{partition}: {err}") from None
        finally:
            self._consumer.unassign()
        if done:
            # Read past the range, or to the end of the partition (when the range reaches
            # beyond the end, nothing exists there yet either).
            scanned_to = max(scanned_to, end)
        return summarize(start, end, scanned_to, seen), end <= high

    def record_timestamp(self, topic: str, partition: int, offset: int) -> int:
        """Timestamp of the first committed record at or after ``offset`` (-1 if none)."""
        self._consumer.assign([TopicPartition(topic, partition, offset)])
        try:
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                batch: list[Any] = self._consumer.consume(1, timeout=0.3)
                for msg in batch:
                    if msg.error() is None:
                        return int(msg.timestamp()[1])
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return -1
        except KafkaException as err:
            raise Unreachable(f"read {topic}/{partition}@{offset}: {err}") from None
        finally:
            self._consumer.unassign()
        return -1
