"""Checking replication results: pure comparisons of record lists, plus one reader.

Every check here works on :class:`Record` values (what a record looked like where it
landed: topic, partition, offset, key, value, headers, timestamp). They come from
:func:`read_topic` (a whole topic read back with read_committed) or from
:mod:`tests.support.workload` (what a producer had acknowledged).

:func:`verify_mirror` compares the committed records of a source with their copies in a
target (docs/design.md: guarantees 1-4, Wire contract) and returns a :class:`Report` of concrete
problems and counts; ``report.assert_ok()`` fails a test with a readable summary.
:func:`verify_active_active` does the same for two clusters replicating into each other.

How a target record is matched with its source record: by its ``crossfeed-prov`` header
when that names a committed source record; otherwise by content (topic, key, value,
user headers, timestamp), so a copy with wrong provenance is still counted as a copy
(and reported as a provenance mismatch) instead of as one loss plus one stranger.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crossfeed.core.provenance import hops as parse_hops
from crossfeed.core.provenance import should_copy
from crossfeed.wire.headers import (
    LEGACY_PROVENANCE,
    ORIGIN_TOPIC,
    PROV,
    SRC,
    is_crossfeed_header,
)

Header = tuple[str, bytes | None]
STAMPED = (PROV, *LEGACY_PROVENANCE)  # a copy carries PROV alone; a source may carry either
MAX_PROBLEMS = 20


@dataclass(frozen=True, slots=True)
class Record:
    """One record as it sits in a topic (or as a producer's delivery report placed it)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp_ms: int = 0

    @property
    def where(self) -> str:
        return f"{self.topic}/{self.partition}/{self.offset}"

    def header(self, name: str) -> bytes | None:
        """Value of the first header called ``name`` (None if absent)."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def header_values(self, name: str) -> list[bytes | None]:
        return [value for key, value in self.headers if key == name]

    @property
    def user_headers(self) -> tuple[Header, ...]:
        """Headers not owned by crossfeed, in order (duplicates kept)."""
        return tuple(h for h in self.headers if not is_crossfeed_header(h[0]))

    @property
    def hops(self) -> list[str]:
        return parse_hops(self.headers)

    @classmethod
    def from_message(cls, msg: Any) -> Record:
        """From a confluent-kafka ``Message`` read by a consumer."""
        headers = msg.headers() or []
        return cls(
            topic=msg.topic(),
            partition=msg.partition(),
            offset=msg.offset(),
            key=msg.key(),
            value=msg.value(),
            headers=tuple((name, _as_bytes(value)) for name, value in headers),
            timestamp_ms=msg.timestamp()[1],
        )


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


# -- reading ---------------------------------------------------------------------------


def read_topic(
    config: dict[str, Any],
    topic: str,
    *,
    expect: int | None = None,
    timeout_s: float = 60.0,
    isolation: str = "read_committed",
) -> dict[int, list[Record]]:
    """Every record of ``topic`` by partition, in offset order (read_committed).

    See :func:`read_many` for ``expect`` and ``timeout_s``.
    """
    found = read_many(config, [topic], expect=expect, timeout_s=timeout_s, isolation=isolation)
    return found[topic]


def read_topics(
    config: dict[str, Any],
    topics: Iterable[str],
    *,
    expect: int | None = None,
    timeout_s: float = 60.0,
    isolation: str = "read_committed",
) -> list[Record]:
    """Every record of several topics, flat (offset order within each partition);
    ``expect`` counts the records of all topics together (see :func:`read_many`)."""
    found = read_many(config, topics, expect=expect, timeout_s=timeout_s, isolation=isolation)
    return flatten(found)


def read_many(
    config: dict[str, Any],
    topics: Iterable[str],
    *,
    expect: int | None = None,
    timeout_s: float = 60.0,
    isolation: str = "read_committed",
) -> dict[str, dict[int, list[Record]]]:
    """Every record of ``topics``: ``{topic: {partition: [records in offset order]}}``.

    One consumer reads from the beginning until every partition reports end-of-partition
    (its last stable offset under read_committed, so the reader never waits for a
    transaction opened after that point).

    Without ``expect``: every topic must exist; not reaching the end within ``timeout_s``
    raises TimeoutError (a transaction left open?).

    With ``expect`` (records over all topics, e.g. what a replicator should have written):
    topics that do not exist yet are waited for, and reading goes on until that many
    records arrived, then up to the end (at most 5 s more, so extra copies are seen);
    on timeout it returns what it has, so the verification can say what is missing.
    """
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

    from crossfeed.kafka import clients

    wanted = list(dict.fromkeys(topics))
    consumer = clients.consumer(
        config,
        **{
            "group.id": "crossfeed-test-reader",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 50,
        },
    )
    out: dict[str, dict[int, list[Record]]] = {}
    assigned: list[TopicPartition] = []
    at_end: set[tuple[str, int]] = set()
    count = 0
    deadline = time.monotonic() + timeout_s
    next_lookup = 0.0

    def assign_new_topics() -> None:
        meta = consumer.list_topics(timeout=10)
        new: list[TopicPartition] = []
        for topic in wanted:
            info = meta.topics.get(topic)
            if topic in out or info is None or info.error is not None or not info.partitions:
                continue
            out[topic] = {p: [] for p in sorted(info.partitions)}
            new.extend(TopicPartition(topic, p, OFFSET_BEGINNING) for p in out[topic])
        if new:
            assigned.extend(new)
            consumer.incremental_assign(new)
        missing = [t for t in wanted if t not in out]
        if missing and expect is None:
            raise KafkaException(f"topic(s) {missing} do not exist on {config}")

    try:
        while True:
            if len(out) < len(wanted) and time.monotonic() >= next_lookup:
                assign_new_topics()
                next_lookup = time.monotonic() + 1.0
            if assigned:
                batch = consumer.consume(10_000, timeout=0.1)
            else:
                batch = []
                time.sleep(0.1)
            for msg in batch:
                err = msg.error()
                where = (str(msg.topic()), int(msg.partition() or 0))
                if err is None:
                    out[where[0]][where[1]].append(Record.from_message(msg))
                    at_end.discard(where)
                    count += 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(where)
                elif err.fatal() or not err.retriable():
                    raise KafkaException(err)
            complete = len(out) == len(wanted) and len(at_end) == len(assigned)
            if complete and (expect is None or count >= expect):
                return out
            if expect is not None and count >= expect:
                deadline = min(deadline, time.monotonic() + 5.0)  # the tail, briefly
            if time.monotonic() > deadline:
                if expect is not None:
                    for topic in wanted:
                        out.setdefault(topic, {})
                    return out
                behind = sorted(
                    f"{tp.topic}/{tp.partition}"
                    for tp in assigned
                    if (tp.topic, tp.partition) not in at_end
                )
                raise TimeoutError(
                    f"read_many: {count} records after {timeout_s}s without reaching the end "
                    f"of {behind} (a transaction left open?)"
                )
    finally:
        consumer.close()


# -- shapes ----------------------------------------------------------------------------

Records = Iterable[Record] | Mapping[Any, Any]
"""A flat iterable of records, or mappings of them (``{partition: [...]}``,
``{topic: {partition: [...]}}``) as :func:`read_topic` returns."""


def flatten(records: Records) -> list[Record]:
    """Any accepted shape as one flat list."""
    if isinstance(records, Mapping):
        out: list[Record] = []
        for value in records.values():
            out.extend(flatten(value))
        return out
    out = []
    for item in records:
        if isinstance(item, Record):
            out.append(item)
        else:
            out.extend(flatten(item))
    return out


def by_partition(records: Records) -> dict[tuple[str, int], list[Record]]:
    """Records grouped by (topic, partition), each group in offset order."""
    groups: dict[tuple[str, int], list[Record]] = defaultdict(list)
    for record in flatten(records):
        groups[(record.topic, record.partition)].append(record)
    for group in groups.values():
        group.sort(key=lambda r: r.offset)
    return dict(groups)


# -- the report ------------------------------------------------------------------------


@dataclass
class Report:
    """What a verification found: counts, and the first problems in words."""

    name: str = "mirror"
    expected: int = 0  # source records that should have a copy
    received: int = 0  # records looked at on the target
    matched: int = 0  # expected records with at least one copy
    missing: int = 0
    duplicated: int = 0  # copies beyond the first
    out_of_order: int = 0
    mismatched: int = 0  # first copies whose content or provenance differs
    unexpected: int = 0  # target records matching no committed source record
    looped: int = 0  # copies of records that had already been in the target cluster
    problems: list[str] = field(default_factory=list)
    problem_count: int = 0
    parts: list[Report] = field(default_factory=list)

    COUNTS = ("missing", "duplicated", "out_of_order", "mismatched", "unexpected", "looped")

    def problem(self, text: str) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)

    @property
    def ok(self) -> bool:
        return self.problem_count == 0 and not any(getattr(self, c) for c in self.COUNTS)

    def counts(self) -> dict[str, int]:
        names = ("expected", "received", "matched", *self.COUNTS)
        return {name: getattr(self, name) for name in names}

    def summary(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts().items())
        lines = [f"{self.name}: {'OK' if self.ok else 'FAILED'} ({counts})"]
        lines.extend(f"  - {p}" for p in self.problems)
        if self.problem_count > len(self.problems):
            lines.append(f"  ... and {self.problem_count - len(self.problems)} more problems")
        return "\n".join(lines)

    __str__ = summary

    def assert_ok(self, context: str = "") -> None:
        """Raise AssertionError with the summary unless every check passed."""
        if not self.ok:
            prefix = f"{context}\n" if context else ""
            raise AssertionError(prefix + self.summary())

    @classmethod
    def combine(cls, name: str, parts: Sequence[Report]) -> Report:
        """One report adding up ``parts``; problems prefixed with the part's name."""
        total = cls(name=name, parts=list(parts))
        for part in parts:
            for count in ("expected", "received", "matched", *cls.COUNTS):
                setattr(total, count, getattr(total, count) + getattr(part, count))
            for text in part.problems:
                total.problem(f"[{part.name}] {text}")
            total.problem_count += part.problem_count - len(part.problems)
        return total


# -- mirror ----------------------------------------------------------------------------


def _show(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_PREFIX = "crossfeed-"
_STAMPED = frozenset(STAMPED)


@dataclass(frozen=True, slots=True)
class _Parts:
    """A record's headers split once: user ones, other ``crossfeed-*`` ones (kept as
    they are on every hop), and the provenance ones by name (all values, in order)."""

    user: tuple[Header, ...]
    kept: tuple[Header, ...]
    provenance: dict[str, list[bytes | None]]

    @classmethod
    def of(cls, headers: Iterable[Header]) -> _Parts:
        user: list[Header] = []
        kept: list[Header] = []
        provenance: dict[str, list[bytes | None]] = {}
        for header in headers:
            name = header[0]
            if not name.startswith(_PREFIX):
                user.append(header)
            elif name in _STAMPED:
                provenance.setdefault(name, []).append(header[1])
            else:
                kept.append(header)
        return cls(tuple(user), tuple(kept), provenance)


def _fingerprint(topic: str, r: Record, user: tuple[Header, ...]) -> tuple[Any, ...]:
    return (topic, r.key, r.value, user, r.timestamp_ms)


def expected_provenance(
    source: Record, source_cluster_id: str, hops_before: Sequence[str] = ()
) -> dict[str, bytes]:
    """The provenance headers the copy of ``source`` must carry (docs/design.md, Wire contract).

    The hops before this link are those the source record carries, else ``hops_before``
    (for source records without headers, e.g. what a producer sent).
    """
    stamped = any(name in _STAMPED for name, _ in source.headers)
    prior = source.hops if stamped else []
    prior = prior or list(hops_before)
    chain = prior if prior and prior[-1] == source_cluster_id else [*prior, source_cluster_id]
    origin_topic = _origin_topic(source) or source.topic
    tail = "" if origin_topic == source.topic else f"/{origin_topic}"
    where = f"{source.topic}/{source.partition}/{source.offset}"
    return {PROV: f"{','.join(chain)}/{where}{tail}".encode()}


def _origin_topic(source: Record) -> str | None:
    """The topic a source record was first produced to, as its provenance says (written
    here from the wire contract, not with the code under test)."""
    prov = source.header(PROV)
    if prov:
        fields = prov.decode().split("/")
        return fields[4] if len(fields) == 5 else fields[1]
    legacy = source.header(ORIGIN_TOPIC)
    return legacy.decode() if legacy else None


@dataclass(frozen=True, slots=True)
class _Source:
    record: Record
    parts: _Parts
    provenance: dict[str, bytes]  # what the copy must carry
    target_topic: str


def _compare(source: _Source, copy: Record, parts: _Parts) -> list[str]:
    """Differences between a source record and its copy, in words (empty if none)."""
    diffs: list[str] = []
    src = source.record
    if copy.topic != source.target_topic:
        diffs.append(f"topic {copy.topic!r} != {source.target_topic!r}")
    if copy.partition != src.partition:
        diffs.append(f"partition {copy.partition} != source partition {src.partition}")
    if copy.key != src.key:
        diffs.append(f"key {_show(copy.key)} != {_show(src.key)}")
    if copy.value != src.value:
        diffs.append(f"value {_show(copy.value)} != {_show(src.value)}")
    if copy.timestamp_ms != src.timestamp_ms:
        diffs.append(f"timestamp {copy.timestamp_ms} != {src.timestamp_ms}")
    if parts.user != source.parts.user:
        diffs.append(f"user headers {_show(parts.user, 120)} != {_show(source.parts.user, 120)}")
    if parts.kept != source.parts.kept:
        diffs.append(
            f"kept crossfeed headers {_show(parts.kept, 120)} != {_show(source.parts.kept, 120)}"
        )
    for name, want in source.provenance.items():
        got = parts.provenance.get(name, [])
        if got != [want]:
            shown = "absent" if not got else " + ".join(_show(v) for v in got)
            diffs.append(f"{name} {shown} != {want!r}")
    for name in parts.provenance.keys() - source.provenance.keys():  # a legacy one
        diffs.append(f"{name} present on a copy")
    return diffs


def verify_mirror(
    source_records: Records,
    target_records: Records,
    *,
    source_cluster_id: str,
    target_cluster_id: str,
    hops_before: Sequence[str] = (),
    rename: Callable[[str], str] | Mapping[str, str] | None = None,
    name: str = "mirror",
) -> Report:
    """Check that ``target_records`` are exactly the mirror copies of ``source_records``.

    ``source_records``: the committed records of the selected source topics (as read or as
    acknowledged). Those that have already been in the target cluster (its cluster.id in
    their hops or origin) are expected NOT to be copied. ``target_records``: everything
    read from the target topics. Topic names map through ``rename`` (identity by default).

    Checked: no loss, no duplicates, per source partition the same order in the same
    partition number, key/value/timestamp/user headers identical, other ``crossfeed-*``
    headers kept, and provenance (one ``crossfeed-prov``: hops = hops before + source
    cluster.id, the source record's topic, partition and offset, the origin topic when it
    is another).
    """
    report = Report(name=name)
    target_topic: Callable[[str], str]
    if rename is None:
        target_topic = str
    elif isinstance(rename, Mapping):
        mapping = dict(rename)
        target_topic = lambda topic: mapping.get(topic, topic)  # noqa: E731
    else:
        target_topic = rename

    Ident = tuple[str, int, int]
    expected: dict[Ident, _Source] = {}
    excluded: dict[Ident, _Source] = {}
    by_src: dict[bytes, Ident] = {}  # expected crossfeed-src value -> source record
    by_content: dict[tuple[Any, ...], deque[Ident]] = defaultdict(deque)
    first_by_content: dict[tuple[Any, ...], Ident] = {}
    for record in sorted(flatten(source_records), key=lambda r: (r.topic, r.partition, r.offset)):
        key = (record.topic, record.partition, record.offset)
        if key in expected or key in excluded:
            report.problem(f"source record {record.where} given twice (check the test input)")
            continue
        parts = _Parts.of(record.headers)
        info = _Source(
            record,
            parts,
            expected_provenance(record, source_cluster_id, hops_before),
            target_topic(record.topic),
        )
        copyable = not parts.provenance or should_copy(list(record.headers), target_cluster_id)
        (expected if copyable else excluded)[key] = info
        by_src[info.provenance[PROV]] = key
        fingerprint = _fingerprint(info.target_topic, record, parts.user)
        by_content[fingerprint].append(key)
        first_by_content.setdefault(fingerprint, key)
    report.expected = len(expected)

    def identify(copy: Record, parts: _Parts) -> Ident | None:
        """The source record a target record is a copy of (by crossfeed-prov, else by
        content: the first such record not yet copied, else the first one), or None."""
        src = parts.provenance.get(PROV)
        if src and src[0] is not None and src[0] in by_src:
            return by_src[src[0]]
        fingerprint = _fingerprint(copy.topic, copy, parts.user)
        candidates = by_content.get(fingerprint)
        while candidates:
            ident = candidates.popleft()
            if not copies.get(ident):
                return ident
        return first_by_content.get(fingerprint)

    copies: dict[Ident, int] = defaultdict(int)
    for (topic, partition), group in sorted(by_partition(target_records).items()):
        # Highest source offset seen so far in this target partition, per source partition.
        last_seen: dict[tuple[str, int], tuple[int, int]] = {}
        for copy in group:
            report.received += 1
            parts = _Parts.of(copy.headers)
            ident = identify(copy, parts)
            if ident is None:
                report.unexpected += 1
                report.problem(
                    f"unexpected record at {copy.where} (matches no committed source record; "
                    f"key={_show(copy.key)} prov={_show(copy.header(PROV))})"
                )
                continue
            copies[ident] += 1
            src_where = "/".join(map(str, ident))
            if ident in excluded:
                report.looped += 1
                report.problem(
                    f"looped: {src_where} was copied to {copy.where} although it had already "
                    f"been in the target cluster (hops {excluded[ident].record.hops})"
                )
                continue
            if copies[ident] > 1:
                report.duplicated += 1
                report.problem(f"duplicate: {src_where} copied again at {copy.where}")
                continue
            source = expected[ident]
            source_tp = (ident[0], ident[1])
            previous = last_seen.get(source_tp)
            if previous is not None and previous[0] > ident[2]:
                report.out_of_order += 1
                report.problem(
                    f"out of order: {src_where} at {copy.where} comes after the copy of "
                    f"{ident[0]}/{ident[1]}/{previous[0]} (at {topic}/{partition}/{previous[1]})"
                )
            else:
                last_seen[source_tp] = (ident[2], copy.offset)
            diffs = _compare(source, copy, parts)
            if diffs:
                report.mismatched += 1
                report.problem(f"mismatch: {src_where} -> {copy.where}: " + "; ".join(diffs))

    missing = [ident for ident in expected if not copies.get(ident)]
    report.missing = len(missing)
    report.matched = report.expected - report.missing
    for ident in missing[:MAX_PROBLEMS]:
        report.problem(f"missing: {'/'.join(map(str, ident))} has no copy on the target")
    report.problem_count += max(0, len(missing) - MAX_PROBLEMS)
    return report


# -- the source itself -----------------------------------------------------------------


def verify_same(
    expected: Records, actual: Records, *, name: str = "local", ignore_headers: bool = False
) -> Report:
    """``actual`` holds exactly ``expected``, record for record at the same offsets
    (e.g. what a producer had acknowledged vs what a read_committed consumer sees)."""
    report = Report(name=name)
    want = {(r.topic, r.partition, r.offset): r for r in flatten(expected)}
    got: dict[tuple[str, int, int], Record] = {}
    for record in flatten(actual):
        ident = (record.topic, record.partition, record.offset)
        if ident in got:
            report.duplicated += 1
            report.problem(f"duplicate: {record.where} given twice")
        got[ident] = record
    report.expected, report.received = len(want), len(got)
    for ident, record in sorted(want.items()):
        have = got.get(ident)
        if have is None:
            report.missing += 1
            report.problem(f"missing: {record.where}")
            continue
        report.matched += 1
        same = (have.key, have.value, have.timestamp_ms) == (
            record.key,
            record.value,
            record.timestamp_ms,
        )
        if same and not ignore_headers:
            same = have.headers == record.headers
        if not same:
            report.mismatched += 1
            report.problem(
                f"mismatch at {record.where}: {_show(have, 120)} != {_show(record, 120)}"
            )
    for ident in sorted(set(got) - set(want)):
        report.unexpected += 1
        report.problem(f"unexpected: {got[ident].where}")
    return report


# -- active-active ---------------------------------------------------------------------


def verify_active_active(
    records_a_produced: Records,
    records_b_produced: Records,
    topic_a_records: Records,
    topic_b_records: Records,
    id_a: str,
    id_b: str,
) -> Report:
    """Two clusters replicating into each other with the same topic names.

    ``records_x_produced``: what producers on cluster X had acknowledged (committed);
    ``topic_x_records``: everything read back from those topics on cluster X. Checks that
    each cluster holds its own records unchanged at their offsets plus exactly one copy
    of every record produced on the other side (content, order, provenance as in
    :func:`verify_mirror`), and that no record ever came back (a record with both
    cluster ids in its hops is a loop, wherever it appears).
    """
    parts: list[Report] = []
    split: dict[str, tuple[list[Record], list[Record]]] = {}
    for label, records in (("A", topic_a_records), ("B", topic_b_records)):
        local: list[Record] = []
        copied: list[Record] = []
        for record in flatten(records):
            stamped = record.header(PROV) is not None or record.header(SRC) is not None
            (copied if stamped else local).append(record)
        split[label] = (local, copied)

    parts.append(verify_same(records_a_produced, split["A"][0], name="A local"))
    parts.append(verify_same(records_b_produced, split["B"][0], name="B local"))
    parts.append(
        verify_mirror(
            records_b_produced,
            split["A"][1],
            source_cluster_id=id_b,
            target_cluster_id=id_a,
            name="B->A",
        )
    )
    parts.append(
        verify_mirror(
            records_a_produced,
            split["B"][1],
            source_cluster_id=id_a,
            target_cluster_id=id_b,
            name="A->B",
        )
    )
    loops = Report(name="loops")
    for label, own_id in (("A", id_a), ("B", id_b)):
        for record in split[label][1]:
            loops.received += 1
            chain = record.hops
            if own_id in chain or (id_a in chain and id_b in chain) or len(chain) != 1:
                loops.looped += 1
                loops.problem(
                    f"loop: record at {label}:{record.where} has hops {chain} "
                    f"(provenance {_show(record.header(PROV))})"
                )
    parts.append(loops)
    return Report.combine("active-active", parts)


def assert_mirrored(
    clusters: Any,
    names: Sequence[str],
    produced: Sequence[Any],
    procs: Iterable[Any],
    timeout_s: float = 120,
) -> None:
    """Every record of ``names`` on dc-a is on dc-b exactly once, in order, with its
    provenance (waits up to ``timeout_s`` for ``len(produced)``); ``procs`` describe a
    failure."""
    source = read_many(clusters.a.config, list(names))
    target = read_many(clusters.b.config, list(names), expect=len(produced), timeout_s=timeout_s)
    logs = "\n".join(f"  {p.describe()}" for p in procs)
    verify_mirror(
        source,
        target,
        source_cluster_id=clusters.a.cluster_id,
        target_cluster_id=clusters.b.cluster_id,
    ).assert_ok(logs)
