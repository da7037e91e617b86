"""An ordered feed's records in the puller (docs/ordered-feeds.md §2).

One staging record per source record: key, value and timestamp byte for byte, the source
headers with the provenance header stamped and ``crossfeed-commit-ts`` always present.
Producer watermarks (``crossfeed-type: resolved`` records on the source) are consumed,
never copied: once a partition has shown one, only its watermarks advance its resolved_ts
(``crossfeed-resolved-from: watermarks`` on its marks carries that over to a new task
owner); without them, the newest commit_ts (or now, when caught up) minus ``lateness.ms``.
A producer's *final* watermark (``crossfeed-watermark: final``: it closed) hands the
partition back to that clock, never below the final watermark, until another producer's
watermark leads it again: a topic whose producer is gone holds the feed back no more.
No resolved_ts passes the moment the source's topics were last listed: a topic created
since may already hold changes, and they must not arrive behind it.
The marks carry ``crossfeed-commit-ts: <resolved_ts>``, and resolved_ts never goes
backwards (a new owner starts from the newest mark's). A data record at or below the
partition's resolved_ts — emitted, or promised by a watermark already read — would break
that promise: it goes to the DLQ (``LateChange``), as does one whose
``crossfeed-commit-ts`` or ``crossfeed-txn`` is malformed or that would not fit the staging
topic's ``max.message.bytes``.

Debezium input (``--input debezium``): a value in the JSON converter's form keeps only its
payload in ``.changes``, with ``crossfeed-schema`` naming its Connect schema, which goes
once per task into ``_crossfeed.<feed>.schemas`` in the same Kafka transaction as (or an
earlier one than) the first change that refers to it (task_state.SchemaRefs).
"""

from __future__ import annotations

from typing import Any

from crossfeed.core import provenance
from crossfeed.core.timestamps import commit_ts_us, parse_commit_ts
from crossfeed.kafka.protocols import Message
from crossfeed.services.puller.task_state import FeedContext, PartitionState
from crossfeed.wire import codec, headers, records
from crossfeed.wire.changes import parse_txn

RESOLVED = headers.TYPE_RESOLVED.encode()
FROM_WATERMARKS = (headers.RESOLVED_FROM, headers.RESOLVED_FROM_WATERMARKS.encode())
FINAL = headers.WATERMARK_FINAL.encode()
# Bytes a record costs in a batch of its own beyond key, value and header bytes (v2 batch
# header 61 + record framing), and per header (varints): what the size check adds.
RECORD_OVERHEAD = 128
HEADER_OVERHEAD = 10
Refused = tuple[str, str]
"""Why a source record goes to the dead letter topic instead: error class, reason."""


def staged_size(key: bytes | None, value: bytes | None, hdrs: list[Any]) -> int:
    """Upper bound of the bytes one staging record takes in a batch of its own."""
    size = RECORD_OVERHEAD + len(key or b"") + len(value or b"")
    for name, v in hdrs:
        size += HEADER_OVERHEAD + len(name) + len(v or b"")
    return size


def ordered_mark_headers(resolved_ts_us: int, watermarked: bool) -> list[Any]:
    """Headers of an ordered feed's resolved mark: a resolved mark's, and whether the
    partition follows producer watermarks."""
    hdrs: list[Any] = records.resolved_mark_headers(resolved_ts_us)
    if watermarked:
        hdrs.append(FROM_WATERMARKS)
    return hdrs


def next_resolved(
    *,
    previous: int,
    watermarked: bool,
    watermark_us: int,
    newest_commit_ts_us: int,
    caught_up: bool,
    now_us: int,
    lateness_us: int,
    known_until_us: int | None = None,
) -> int:
    """An ordered feed's resolved_ts of a source partition at the end of a transaction:
    the producer's watermark when the partition follows them, else the newest commit_ts
    (or now, when caught up) minus the lateness, and not below a final watermark read
    (``watermark_us`` of a partition whose producer closed); never below ``previous`` or
    0.

    Nor above ``known_until_us``, when the last topic listing began: a topic (or
    partition) created after it is not read yet, and its first changes may be older than
    what this partition's own records allow. Resolving past them would make them late."""
    if watermarked:
        candidate = watermark_us
    else:
        candidate = (now_us if caught_up else newest_commit_ts_us) - lateness_us
        candidate = max(candidate, watermark_us)
    if known_until_us is not None:
        candidate = min(candidate, known_until_us)
    return max(candidate, previous, 0)


def is_final(hdrs: list[Any]) -> bool:
    """A producer watermark saying its producer closed (``crossfeed-watermark: final``)."""
    return any(name == headers.WATERMARK and value == FINAL for name, value in hdrs)


def watermark_ts(hdrs: list[Any], value: bytes | None) -> int:
    """The resolved ts of a producer watermark: its crossfeed-commit-ts header, else
    its ResolvedMark value; ValueError if neither says."""
    found = [v for name, v in hdrs if name == headers.COMMIT_TS]
    if found:
        ts = parse_commit_ts(found[0])
        if any(parse_commit_ts(v) != ts for v in found[1:]):
            raise ValueError(f"watermark with conflicting {headers.COMMIT_TS} headers")
        return ts
    if not value:
        raise ValueError(f"watermark without {headers.COMMIT_TS} header or value")
    try:
        return int(codec.decode("ResolvedMark", value)["resolved_ts_us"])
    except codec.CodecError as err:
        raise ValueError(f"watermark value is not a ResolvedMark: {err}") from None


def add(ctx: FeedContext, state: PartitionState, msg: Message, offset: int) -> Refused | None:
    """An ordered feed's record at ``offset`` of ``state``'s partition: a producer
    watermark moves the partition's resolved_ts; a change becomes one staging record; a
    record copied before into the target cluster is dropped. Returns why it goes to the
    dead letter topic instead (the caller sends it), else None."""
    hdrs = msg.headers() or []
    # One pass over the headers for what matters here (the hot path).
    commit_values: list[bytes | None] = []
    txn_values: list[bytes | None] = []
    watermark = stamped_before = by_reference = False
    for name, value in hdrs:
        if name.startswith(headers.PREFIX):
            if name == headers.COMMIT_TS:
                commit_values.append(value)
            elif name == headers.TXN:
                txn_values.append(value)
            elif name == headers.TYPE:
                watermark = watermark or value == RESOLVED
            elif name in provenance.STAMPED:
                stamped_before = True
            elif name == headers.SCHEMA:
                by_reference = True
    if stamped_before and state.is_loop(hdrs, ctx.target_cluster_id):
        return None
    if watermark:
        try:
            ts = watermark_ts(hdrs, msg.value())
        except ValueError as err:
            return "BadWatermark", str(err)
        state.watermarked = not is_final(hdrs)  # final: the clock leads it from here
        state.watermark_us = max(state.watermark_us, ts)
        return None
    if ctx.filtering:
        reason = ctx.reject_reason(msg)
        if reason is not None:
            return "RejectedByFilter", reason
    ts_ms = msg.timestamp()[1]
    try:
        commit_ts = _commit_ts(commit_values, hdrs, ts_ms)
        for value in txn_values:
            parse_txn(value)
    except ValueError as err:
        return "BadChangeHeaders", str(err)
    floor = state.floor_us()
    if commit_ts <= floor:
        return (
            "LateChange",
            f"commit_ts {commit_ts} is at or below the resolved_ts {floor} of "
            f"{state.tp} already promised (a producer watermark, or lateness.ms too low)",
        )
    if stamped_before:
        try:
            stamped = state.stamper.stamp(hdrs, offset)
        except ValueError as err:  # a provenance header that is not UTF-8
            return "BadProvenance", str(err)
    else:
        stamped = state.stamper.first_hop(hdrs, offset)
    if not commit_values:
        stamped.append((headers.COMMIT_TS, b"%d" % commit_ts))
    key, value = msg.key(), msg.value()
    if state.schemas is not None and not by_reference:
        taken = state.schemas.take(value)
        if taken is not None:
            sid, value = taken
            stamped.append((headers.SCHEMA, sid))
    size = staged_size(key, value, stamped)
    if size > ctx.staging_max_bytes:
        return (
            "RecordTooLarge",
            f"the staging record would take ~{size} bytes, more than the "
            f"max.message.bytes {ctx.staging_max_bytes} of {ctx.changes_topic}",
        )
    state.staged.append((key, value, stamped, ts_ms))
    state.staged_bytes += size
    state.last_ts_us = max(state.last_ts_us, commit_ts)
    return None


def _commit_ts(values: list[bytes | None], hdrs: list[Any], ts_ms: int) -> int:
    """commit_ts_us for the values of the record's crossfeed-commit-ts headers, with a fast
    path for the usual one well-formed value."""
    if len(values) == 1:
        value = values[0]
        if value is not None and value.isdigit() and len(value) < 19:
            return int(value)
    return commit_ts_us(hdrs, ts_ms)
