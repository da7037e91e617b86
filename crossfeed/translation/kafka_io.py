"""The admin requests offset translation makes (bounded reads are in ``reader.py``).

Every call has a short timeout and raises :class:`Unreachable` when the cluster does not
answer in time, so a translator facing a lost data center goes on with what it knows
instead of hanging (the coordinator's lease must keep ticking).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from crossfeed.kafka import clients

log = logging.getLogger(__name__)

TIMEOUT_S: Final = 5.0
QUIET_CONF: Final = {"logger": clients.QUIET, "socket.connection.setup.timeout.ms": 2000}
"""Clients on a cluster that may be lost: crossfeed logs reachability itself, once."""

TP = tuple[str, int]
T = TypeVar("T")


RETIRE_AFTER_S: Final = 1.0
POLL_S: Final = 0.1  # how soon a request in flight notices ClusterAdmin.interrupt()


_in_call = threading.local()  # .where: (ClusterAdmin, interrupts at the call's start)


class ClusterAdmin:
    """The admin client of one cluster, replaced after any failed request.

    librdkafka (2.x) aborts the whole process when a coordinator request (group offsets,
    describe or alter a group) that timed out while the cluster was down finishes its
    coordinator lookup after the cluster is back. So a client that saw a request fail is
    retired at once, a fresh one serves from then on, and the retired one is destroyed
    ``RETIRE_AFTER_S`` later — before a lost cluster can be back, and not at once, on a
    timer thread: admin results arrive on librdkafka's background thread, and a client
    whose last reference went away there would be destroyed there, which aborts as well.
    """

    def __init__(self, conf: Mapping[str, Any], *, quiet: bool = False) -> None:
        self.conf = {**conf, **(QUIET_CONF if quiet else {})}
        self._lock = threading.Lock()
        self._client: AdminClient | None = None
        self._interrupts = 0

    def interrupt(self) -> None:
        """Make the requests in flight give up now (within POLL_S) with Unreachable: a
        failover found the cluster refusing connections, and a translation round waiting
        out its timeout on the dead cluster holds the translator the failover needs."""
        with self._lock:
            self._interrupts += 1

    def interrupted_since(self, mark: int) -> bool:
        return self._interrupts != mark

    def client(self) -> AdminClient:
        """The current client, for requests that need no retiring (metadata)."""
        with self._lock:
            if self._client is None:
                self._client = clients.admin(dict(self.conf))
            return self._client

    def call(self, request: Callable[[AdminClient], T]) -> T:
        """``request(client)``; on :class:`Unreachable` the client is retired."""
        admin = self.client()
        _in_call.where = (self, self._interrupts)
        try:
            return request(admin)
        except Unreachable as err:
            failed = err.detached()
        finally:
            _in_call.where = None
        # Out of the except block, and with a new exception: the failed one's traceback
        # holds frames that hold the client, and must not keep it alive.
        with self._lock:
            if self._client is admin:
                self._client = None
        retired = [admin]
        del admin
        timer = threading.Timer(RETIRE_AFTER_S, retired.clear)  # the last reference
        timer.daemon = True
        timer.start()
        raise failed


_ADMINS: dict[tuple[tuple[tuple[str, str], ...], bool], ClusterAdmin] = {}
_ADMINS_LOCK = threading.Lock()


def shared_admin(conf: Mapping[str, Any], *, quiet: bool = False) -> ClusterAdmin:
    """The process's :class:`ClusterAdmin` for a cluster configuration (``quiet``: for a
    cluster that may be lost, see QUIET_CONF)."""
    key = (tuple(sorted((str(k), str(v)) for k, v in conf.items() if k != "logger")), quiet)
    with _ADMINS_LOCK:
        admin = _ADMINS.get(key)
        if admin is None:
            admin = _ADMINS[key] = ClusterAdmin(conf, quiet=quiet)
        return admin


class Unreachable(Exception):
    """The cluster did not answer in time (or refused the request)."""

    def detached(self) -> Unreachable:
        """The same failure without a traceback (which would keep the client alive)."""
        return Unreachable(str(self))


class PartlyAnswered(Unreachable):
    """Some of the requests of one call failed; ``answered`` holds the others' results."""

    def __init__(self, message: str, answered: dict[str, Any]) -> None:
        super().__init__(message)
        self.answered = answered

    def detached(self) -> PartlyAnswered:
        return PartlyAnswered(str(self), self.answered)


def _wait(future: Any, timeout_s: float, what: str) -> Any:
    """``future.result(timeout_s)``, giving up early (Unreachable) once the ClusterAdmin
    whose call this is gets interrupted."""
    where = getattr(_in_call, "where", None)
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if where is None or left <= POLL_S:
            return future.result(timeout=max(0.0, left))
        try:
            return future.result(timeout=POLL_S)
        except concurrent.futures.TimeoutError:
            cluster, mark = where
            if cluster.interrupted_since(mark):
                raise Unreachable(f"{what}: given up, the cluster refuses connections") from None


def _result(future: Any, timeout_s: float, what: str) -> Any:
    """A future's result, or Unreachable. The future keeps the exception it failed with;
    its traceback would keep the calling frames — and the admin client — alive in a
    cycle, so it is dropped (see ClusterAdmin)."""
    try:
        return _wait(future, timeout_s, what)
    except Unreachable:
        raise
    except KafkaException as err:
        err.__traceback__ = None
        raise Unreachable(f"{what}: {err.args[0].str() if err.args else err}") from None
    except Exception as err:  # concurrent.futures.TimeoutError and friends
        err.__traceback__ = None
        raise Unreachable(f"{what}: {type(err).__name__} {err}") from None


def list_groups(cluster: ClusterAdmin, timeout_s: float = TIMEOUT_S) -> list[str]:
    """Every consumer group id the cluster knows."""

    def request(admin: AdminClient) -> list[str]:
        future = admin.list_consumer_groups(request_timeout=timeout_s)
        result = _result(future, timeout_s + 1, "list groups")
        if result.errors:
            # A partial listing (a broker did not answer) would make known groups look gone.
            raise Unreachable(f"list groups: {result.errors[0]}")
        return sorted(g.group_id for g in result.valid)

    return cluster.call(request)


def group_offsets(
    cluster: ClusterAdmin, groups: Iterable[str], timeout_s: float = TIMEOUT_S
) -> dict[str, dict[TP, int]]:
    """Committed offsets of each group (stable: pending transactional commits included
    once committed). The admin API takes one group per request; they run concurrently.

    A group whose request fails (its coordinator partition still loading after a broker
    restart, a request timed out on a busy broker) does not hide the others: when some
    answered, :class:`PartlyAnswered` carries their offsets; only when none did is the
    cluster Unreachable."""
    wanted = list(groups)

    def request(admin: AdminClient) -> dict[str, dict[TP, int]]:
        futures = {
            group: admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)],
                require_stable=True,
                request_timeout=timeout_s,
            )[group]
            for group in wanted
        }
        out: dict[str, dict[TP, int]] = {}
        failures: list[str] = []
        deadline = time.monotonic() + timeout_s + 1
        for group, future in futures.items():
            left = max(0.0, deadline - time.monotonic())  # they all run at once
            try:
                listing = _result(future, left, f"offsets of group {group!r}")
            except Unreachable as err:
                failures.append(str(err))
                continue
            out[group] = {
                (tp.topic, tp.partition): tp.offset
                for tp in listing.topic_partitions or []
                if tp.offset >= 0 and tp.error is None
            }
        if failures and not out:
            raise Unreachable(failures[0])
        if failures:
            more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
            raise PartlyAnswered(f"{failures[0]}{more}", out)
        return out

    return cluster.call(request) if wanted else {}


def _spec(name: str, *args: int) -> Any:
    """An ``OffsetSpec`` (its constructors are untyped)."""
    return getattr(OffsetSpec, name)(*args)


def _list_offsets(
    cluster: ClusterAdmin, tps: Iterable[TP], spec: Any, timeout_s: float, what: str
) -> dict[TP, tuple[int, int]]:
    wanted = {TopicPartition(t, p): spec for t, p in tps}

    def request(admin: AdminClient) -> dict[TP, tuple[int, int]]:
        futures = admin.list_offsets(
            wanted, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout_s
        )
        out: dict[TP, tuple[int, int]] = {}
        for tp, future in futures.items():
            try:
                info = _wait(future, timeout_s + 1, what)
            except Unreachable:
                raise
            except Exception as err:
                err.__traceback__ = None  # see _result
                code = err.args[0].code() if isinstance(err, KafkaException) and err.args else None
                if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                    continue  # the topic is gone: nothing to say about it
                raise Unreachable(f"{what} of {tp.topic}/{tp.partition}: {err}") from None
            out[(tp.topic, tp.partition)] = (info.offset, info.timestamp)
        return out

    return cluster.call(request) if wanted else {}


def end_offsets(
    cluster: ClusterAdmin, tps: Iterable[TP], timeout_s: float = TIMEOUT_S
) -> dict[TP, int]:
    """Last stable offset of each partition (what a read_committed reader can reach).

    A partition answered with a negative offset is left out, as if it had not answered: a
    broker shutting down has answered -1001 (OFFSET_INVALID), and taken as the end that
    hid every unreplicated record from a failover report.
    """
    found = _list_offsets(cluster, tps, _spec("latest"), timeout_s, "end offset")
    return {tp: offset for tp, (offset, _) in found.items() if offset >= 0}


def start_offsets(
    cluster: ClusterAdmin, tps: Iterable[TP], timeout_s: float = TIMEOUT_S
) -> dict[TP, int]:
    """Log start offset of each partition (negative answers left out, as for ends)."""
    found = _list_offsets(cluster, tps, _spec("earliest"), timeout_s, "start offset")
    return {tp: offset for tp, (offset, _) in found.items() if offset >= 0}


def max_timestamps(
    cluster: ClusterAdmin, tps: Iterable[TP], timeout_s: float = TIMEOUT_S
) -> dict[TP, int]:
    """Newest record timestamp of each partition (-1 when empty)."""
    found = _list_offsets(cluster, tps, _spec("max_timestamp"), timeout_s, "max timestamp")
    return {tp: ts for tp, (_, ts) in found.items()}


def offset_for_time(
    cluster: ClusterAdmin, tp: TP, timestamp_ms: int, timeout_s: float = TIMEOUT_S
) -> int:
    """First offset whose timestamp is >= ``timestamp_ms``; the end offset if none is.

    The end offset is asked for first. A read_committed timestamp lookup ignores records
    past the last stable offset, so it answers "none" while the records it looks for sit
    in a transaction still open; an end offset asked for afterwards may already lie past
    them (the transaction committed in between), and a group moved there would skip
    them — seen on a first run, where a sink's first transaction held a whole backlog.
    Taken before, the end offset is at or before every record the lookup did not see.
    """
    end = end_offsets(cluster, [tp], timeout_s).get(tp, 0)
    spec = _spec("for_timestamp", timestamp_ms)
    offset = _list_offsets(cluster, [tp], spec, timeout_s, "offset for time").get(tp, (-1, -1))[0]
    return offset if offset >= 0 else end


def active_members(
    cluster: ClusterAdmin, groups: Iterable[str], timeout_s: float = TIMEOUT_S
) -> dict[str, int]:
    """Members of each group right now (0 for an empty or unknown group)."""
    wanted = list(groups)

    def request(admin: AdminClient) -> dict[str, int]:
        futures = admin.describe_consumer_groups(wanted, request_timeout=timeout_s)
        return {
            group: len(_result(future, timeout_s + 1, f"describe group {group!r}").members)
            for group, future in futures.items()
        }

    return cluster.call(request) if wanted else {}


def commit_group_offsets(
    cluster: ClusterAdmin, group: str, offsets: Mapping[TP, int], timeout_s: float = TIMEOUT_S
) -> None:
    """Set a group's committed offsets (Kafka refuses while the group has members)."""
    wanted = ConsumerGroupTopicPartitions(
        group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
    )

    def request(admin: AdminClient) -> None:
        future = admin.alter_consumer_group_offsets([wanted], request_timeout=timeout_s)[group]
        result = _result(future, timeout_s + 1, f"commit offsets of group {group!r}")
        failed = [
            f"{tp.topic}/{tp.partition}: {tp.error}" for tp in result.topic_partitions if tp.error
        ]
        if failed:
            raise Unreachable(f"commit offsets of group {group!r}: {'; '.join(failed)}")

    cluster.call(request)
