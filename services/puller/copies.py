"""A mirror feed's copies, written straight into their target partition.

A source partition's copies go to the target topic named by the feed's rename-format, the
same partition number: key, value, headers and timestamp as on the source, the provenance
header ``crossfeed-prov`` appended last. They are written in blocks (the copies sent
together, in order) inside the task's transaction; the OffsetSync ranges of a block come
from its delivery reports (see :class:`Block`), taken when the transaction is committed
(services/puller/task.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import KafkaError

from crossfeed.core.offset_ranges import OffsetRun, OffsetSyncWriter
from crossfeed.kafka import clients
from crossfeed.kafka.protocols import Message, Producer

Header = tuple[str, bytes | None]
Copy = tuple[int, int, bytes | None, bytes | None, list[Header]]
"""One copy as written: source offset, timestamp (ms, -1 none), key, value, headers."""


@dataclass(frozen=True)
class CopyProblem:
    """Why a block's target offsets are not known: a delivery failed (``error``), or
    another producer wrote between its copies (``error`` None; the task is redone with
    a delivery report per copy, :attr:`Route.exact`)."""

    detail: str
    error: KafkaError | None = None


class Block:
    """Copies written in order to one target partition, whose target offsets are known
    from two delivery reports: the first's and the last's. The idempotent producer
    appends them in order, so when ``last - first == count - 1`` nothing came between
    them and every copy's target offset follows (OffsetSyncWriter.add_block); otherwise
    another writer interleaved, and the transaction is redone with a block per copy.
    Per-copy reports cost a Python callback per copy; two per block do not."""

    __slots__ = ("error", "first_target", "last_target", "source_offsets")

    def __init__(self, source_offsets: Sequence[int]) -> None:
        self.source_offsets = source_offsets
        self.first_target = -1
        self.last_target = -1
        self.error: KafkaError | None = None

    def first(self, err: KafkaError | None, out: Message) -> None:
        if err is not None:
            self.error = err
        else:
            self.first_target = out.offset()

    def last(self, err: KafkaError | None, out: Message) -> None:
        if err is not None:
            self.error = err
        else:
            self.last_target = out.offset()

    def only(self, err: KafkaError | None, out: Message) -> None:
        self.first(err, out)
        self.last(err, out)

    def target_start(self) -> int | CopyProblem:
        """The first copy's target offset, or why it is not known: a failed delivery, or
        copies not contiguous in the target partition (another writer interleaved)."""
        if self.error is not None:
            return CopyProblem(self.error.str(), self.error)
        if self.first_target < 0 or self.last_target < 0:
            missing = KafkaError(KafkaError._FAIL, "delivery reports missing")
            return CopyProblem(missing.str(), missing)
        if self.last_target - self.first_target != len(self.source_offsets) - 1:
            return CopyProblem(
                f"{len(self.source_offsets)} copies landed at target offsets "
                f"{self.first_target}..{self.last_target}: another writer interleaved"
            )
        return self.first_target


@dataclass
class Route:
    """Where one source partition's copies go, and what was written in the open
    transaction."""

    target_topic: str
    partition: int
    max_message_bytes: int
    exact: bool = False  # a block per copy: size-checked, a delivery report each
    blocks: list[Block] = field(default_factory=list)
    syncs: OffsetSyncWriter = field(default_factory=OffsetSyncWriter)

    def write(self, producer: Producer, copies: list[Copy]) -> None:
        """The copies into the target partition as one block (the hot path)."""
        produce = producer.produce
        topic, partition = self.target_topic, self.partition
        block = Block([c[0] for c in copies])
        last = len(copies) - 1
        for i, (_, ts_ms, key, value, hdrs) in enumerate(copies):
            # Reports only for the block's first and last copy (see Block).
            report = None
            if i == 0:
                report = block.first if last else block.only
            elif i == last:
                report = block.last
            while True:
                try:
                    # clients.produce_copy inlined (the hottest loop): by position.
                    produce(topic, value, key, partition, report, None, max(ts_ms, 0), hdrs)
                    break
                except BufferError:  # local queue full: let deliveries drain
                    clients.poll(producer, 0.05)
        self.blocks.append(block)

    def write_one(self, producer: Producer, copy: Copy) -> None:
        """One copy in a block of its own (exact reports)."""
        offset, ts_ms, key, value, hdrs = copy
        block = Block([offset])
        clients.produce_copy(
            producer, self.target_topic, value, key, self.partition, block.only, max(ts_ms, 0), hdrs
        )
        self.blocks.append(block)

    def runs(self) -> list[OffsetRun] | CopyProblem:
        """The OffsetSync runs of the open transaction's blocks, once every delivery
        report is in (after the producer's flush), or the first block's problem; after
        an interleaving the route switches to exact reports."""
        blocks, self.blocks = self.blocks, []
        for block in blocks:
            start = block.target_start()
            if isinstance(start, CopyProblem):
                self.exact = self.exact or start.error is None
                return start
            self.syncs.add_block(block.source_offsets, start)
        return self.syncs.flush()
