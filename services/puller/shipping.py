"""What a task's partition holds, sent into the open transaction: its dead letters, the
Connect schemas its changes refer to, then its staging records (ordered) or copies
(mirror). The counters are kept per send, not per record."""

from __future__ import annotations

from confluent_kafka import KafkaException

from crossfeed.kafka import clients
from crossfeed.kafka.targets import record_size
from crossfeed.services.puller import letters
from crossfeed.services.puller.task_state import FeedContext, PartitionState
from crossfeed.services.puller.txn_producer import TaskProducer, TxnFailure
from crossfeed.wire import topics

COPY_OVERHEAD = 64  # bytes a buffered copy costs beyond key and value (headers, tuple)
SIZE_SLACK = 64 << 10  # below max.message.bytes by this much, no exact size check is needed


def ship(ctx: FeedContext, out: TaskProducer, state: PartitionState) -> TxnFailure | None:
    """Send the partition's dead letters and records (inside the transaction)."""
    failure = out.begin()
    if failure is not None:
        return failure
    try:
        if state.letters:
            _send_letters(out, state)
        schemas = state.schemas
        if schemas is not None and schemas.unsent:
            # Before the changes that refer to them, in the same transaction.
            assert ctx.schemas_topic is not None
            for sid, schema in schemas.unsent:
                out.produce(ctx.schemas_topic, schema, sid, None, partition=0)
            schemas.unsent.clear()
        if state.staged:
            # By position, like the copies (keywords cost ~2 µs per record here).
            topic, partition, producer = ctx.changes_topic, out.staging_partition, out.producer
            for key, value, hdrs, ts_ms in state.staged:
                # A record without a timestamp (-1) is staged at the time of writing (0).
                clients.produce_copy(
                    producer, topic, value, key, partition, None, max(ts_ms, 0), hdrs
                )
            state.records += len(state.staged)
            state.bytes += state.staged_bytes
            state.staged = []
            state.staged_bytes = 0
        if state.copies:
            _write_copies(ctx, out, state)
    except KafkaException as err:  # librdkafka refused a record (a fenced producer)
        return TxnFailure.of(err)
    return None


def _send_letters(out: TaskProducer, state: PartitionState) -> None:
    for key, value, hdrs in state.letters:
        out.produce(topics.DLQ, value, key, hdrs, partition=-1)
        state.dead_letters += 1
    state.letters.clear()


def _write_copies(ctx: FeedContext, out: TaskProducer, state: PartitionState) -> None:
    """A mirror partition's buffered copies into its target partition."""
    route = state.route
    assert route is not None
    copies, state.copies = state.copies, []
    buffered, state.copies_bytes = state.copies_bytes, 0
    written = size_total = 0
    if route.exact or state.max_copy + SIZE_SLACK > route.max_message_bytes:
        # Copy by copy: each size-checked, in a block of its own.
        for copy in copies:
            offset, _, key, value, hdrs = copy
            exact = record_size(key, value, hdrs)
            if exact > route.max_message_bytes:
                letters.letter(
                    ctx,
                    state,
                    (key, value, hdrs),
                    offset,
                    "RecordTooLarge",
                    f"record of {exact} bytes exceeds max.message.bytes="
                    f"{route.max_message_bytes} of target topic {route.target_topic}",
                )
                continue
            route.write_one(out.producer, copy)
            written += 1
            size_total += (len(key) if key else 0) + (len(value) if value else 0)
        _send_letters(out, state)
    else:
        route.write(out.producer, copies)
        written = len(copies)
        size_total = buffered - COPY_OVERHEAD * written
    state.max_copy = 0
    state.records += written
    state.bytes += size_total
    state.last_ts_us = max(copies[-1][1], 0) * 1000
