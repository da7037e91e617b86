"""Where a task resumes: the last block of resolved marks in its staging partition.

Every transaction a puller task commits ends with one ResolvedMark per source
partition of the task, carrying ``next_offset`` — the task's position in that
partition, written atomically with the records it covers. Only the task's owner
writes its staging partition, so the newest committed block of marks holds the
positions to resume from. A new owner first calls ``init_transactions`` (aborting
whatever a predecessor left open), then makes sure the partition's high watermark has
passed everything written before (:func:`reach_log_end`), then reads the partition's
tail here.

A mirror task then checks its marks against its copies at the end of the target
partitions (:func:`copies_in_tail`; the rule is ``crossfeed/core/resume.py``): a
transaction was seen committed on its changes partition but not on a target partition
after dc-b was killed mid-commit, and the copies are what readers see.

The marks also hand over each partition's resolved_ts (it never goes backwards, whoever
owns the task), for ordered feeds whether the partition follows the producer's
watermarks (header ``crossfeed-resolved-from: watermarks``), and the partition's gaps
reported and not yet acknowledged (header ``crossfeed-gaps``, crossfeed/core/gaps.py).
"""

from __future__ import annotations

import functools
import logging
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from crossfeed.core.partitions import TopicPartition
from crossfeed.core.provenance import parse_prov, parse_src
from crossfeed.kafka import clients
from crossfeed.kafka.tails import Tail, TailReader, backwards, scan
from crossfeed.wire import codec, headers

log = logging.getLogger(__name__)

FIRST_WINDOW = 256
FROM_WATERMARKS = (headers.RESOLVED_FROM, headers.RESOLVED_FROM_WATERMARKS.encode())


class Recovered(NamedTuple):
    """What the newest mark of a source partition hands to the task's next owner."""

    next_offset: int
    resolved_ts_us: int
    watermarked: bool  # ordered feeds: the partition follows producer watermarks
    gaps: str = ""  # the partition's gaps not acknowledged (headers.GAPS; core/gaps.py)


def _read_range(
    consumer: Any, topic: str, partition: int, start: int, end: int
) -> list[tuple[bool, bool, str, bytes]]:
    """(is_mark, watermarked, gaps, value) for committed records in [start, end) of one
    partition."""
    out: list[tuple[bool, bool, str, bytes]] = []
    for msg in scan(consumer, KafkaTP(topic, partition), start, end):
        # Packs have no headers and an ordered feed's staging records never carry
        # crossfeed-type (the puller consumes the producer's watermarks).
        hdrs = msg.headers() or []
        is_mark = headers.MARK_HEADER in hdrs
        gaps = next((v.decode() for k, v in hdrs if k == headers.GAPS and v), "") if is_mark else ""
        out.append((is_mark, FROM_WATERMARKS in hdrs, gaps, msg.value()))
    return out


def reach_log_end(producer: Any, topic: str, partition: int, timeout_s: float = 30.0) -> None:
    """Make sure every record written to the partition before now is readable, with a
    transactional producer that has just run ``init_transactions``: one empty record is
    written in a transaction and aborted; once the broker acknowledges it (acks=all) the
    high watermark has passed everything before it, and no read_committed reader ever
    sees the record itself. One round trip per task opening.

    Why: a CI run resumed a task after dc-b's restart from marks one transaction old and
    copied that transaction twice, and the broker's log showed the partition loaded with
    a checkpointed high watermark (50) below its log end (109). A later experiment (one
    KRaft node, kill -9 while transactions commit, high watermark checkpoints hourly)
    found the high watermark at the log end as soon as the node led the partition again,
    so that was probably not the cause, which stays unknown; this write rules it out.
    KafkaException if it does not complete within ``timeout_s`` or the producer is fenced
    meanwhile."""
    failed: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    # clients.flush and clients.served: a producer fenced meanwhile (another member just
    # opened the same task) must fail as a KafkaException, so the opening is retried,
    # not as the SystemError confluent-kafka raises from the delivery report.
    clients.served(producer.begin_transaction)
    producer.produce(topic, None, None, partition, delivered)
    if clients.flush(producer, timeout_s) > 0:
        failed.append(KafkaError(KafkaError._TIMED_OUT, f"{topic}/{partition}: no acknowledgement"))
    clients.served(producer.abort_transaction, timeout_s)
    if failed:
        raise KafkaException(failed[0])


def recover(
    target: dict[str, Any], topic: str, partition: int, expected: set[TopicPartition]
) -> dict[TopicPartition, int] | None:
    """next_offset per source partition from the newest marks; None if none was ever
    written (see :func:`recover_marks`)."""
    marks = recover_marks(target, topic, partition, expected)
    return None if marks is None else {tp: m.next_offset for tp, m in marks.items()}


def recover_marks(
    target: dict[str, Any], topic: str, partition: int, expected: set[TopicPartition]
) -> dict[TopicPartition, Recovered] | None:
    """The newest mark's content per source partition; None if none was ever written.

    Reads backwards in growing windows until every ``expected`` source partition has a
    mark, or a data record precedes the newest run of marks (so that run holds at least
    one whole block), or the partition's start is reached.
    """
    consumer = clients.consumer(target, **{"group.id": f"crossfeed-recovery-{topic}"})
    try:
        low, high = consumer.get_watermark_offsets(KafkaTP(topic, partition), timeout=10)
        if high <= low:
            return None
        positions: dict[TopicPartition, Recovered] = {}
        for start in backwards(low, high, FIRST_WINDOW):
            records = _read_range(consumer, topic, partition, start, high)
            positions.clear()
            seen_marks = False
            bounded = False
            for is_mark, watermarked, gaps, value in reversed(records):  # newest first
                if is_mark:
                    seen_marks = True
                    mark = codec.decode("ResolvedMark", value)
                    tp = TopicPartition(mark["topic"], mark["partition"])
                    found = Recovered(
                        mark["next_offset"], mark["resolved_ts_us"], watermarked, gaps
                    )
                    positions.setdefault(tp, found)
                elif seen_marks:
                    bounded = True
                    break
            if bounded or (positions and expected <= positions.keys()):
                break
        return positions or None
    finally:
        consumer.close()


def copies_in_tail(
    target: dict[str, Any],
    copies: dict[TopicPartition, tuple[str, int]],
    source_cluster_id: str,
) -> dict[TopicPartition, Tail[int]]:
    """For each source partition, the source offsets of its copies at the end of its
    target partition (``copies``: source partition -> target topic and partition),
    committed and aborted. Copies are told apart from other writers' records by their
    last provenance header (``crossfeed-prov``, or the legacy ``crossfeed-src`` of a copy
    an older puller wrote)."""
    reader = TailReader(target)
    try:
        return {
            tp: reader.read(
                KafkaTP(topic, partition),
                functools.partial(_copy_source, (source_cluster_id, tp.topic, tp.partition)),
            )
            for tp, (topic, partition) in copies.items()
        }
    finally:
        reader.close()


def _copy_source(
    source: tuple[str, str, int], hdrs: list[tuple[str, bytes | None]] | None
) -> int | None:
    """The source offset in a record's last provenance header if it names the source
    partition ``source`` (cluster.id, topic, partition: the copy this feed wrote), else
    None."""
    for name, value in reversed(hdrs or []):
        if name in (headers.PROV, headers.SRC):
            if not value:
                return None
            try:
                src = parse_prov(value).src if name == headers.PROV else parse_src(value)
            except ValueError:
                return None
            return src.offset if (src.cluster_id, src.topic, src.partition) == source else None
    return None
