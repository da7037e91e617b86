"""Reading ``_crossfeed.<feed>.sorted`` (docs/ordered-feeds.md §3, §4): no I/O here.

Both ordered-feed sinks (Kafka and PostgreSQL) feed every record of the sorted stream,
in offset order, to a :class:`Sequencer`, which says what to do with it:

* ``OPEN`` — the start of a transaction above the applied position: start applying it;
* ``APPLY`` — a data record of the open transaction: write it;
* ``COMPLETE`` — the end of the open transaction: it is whole, and the applied position
  moves to it (the sink makes that durable with the data);
* ``CUT_SHORT`` — the open transaction will never complete here (another one starts or a
  ``resolved`` mark comes before its end, or its end does not match): throw away what was
  written of it; its complete copy follows later. Another step for the same record
  follows;
* ``RESOLVED`` — a ``resolved`` mark R: once everything read so far is committed,
  checkpoint_ts = R;
* ``DROP`` — nothing to do: a replayed transaction at or below the applied position, or
  a record outside any transaction;
* ``SKIP_CUT`` — the start of a transaction known to be cut short (``known_cut``: a
  sink that had to rewind says which): drop it like a replay; a boundary where the sink
  may commit what it holds.

A transaction comes in one of two forms, and a stream may hold both (a sorter upgraded
mid-stream: the sorter writes the inline form, an older one wrote the framed form):

* **framed** — a ``begin`` record, the data records, a ``commit`` record. The ``begin``
  starts the transaction and the ``commit`` ends it;
* **inline** — the data records alone, each with ``crossfeed-order``
  (``<seq>/<count>/<commit_ts>/<txn id>``): seq 1 starts it, seq == count ends it, and a
  record out of that sequence cuts the open one short. Two records fewer per transaction
  for the sorter to write, the broker to keep and the sink to read.

One record may then be several steps: the only change of an inline transaction is
``OPEN``, ``APPLY`` and ``COMPLETE``.

The applied position is (commit_ts, txn id) of the last whole transaction; the sorter
releases transactions in (commit_ts, txn id) order, so anything at or below it is a
replay. Positions travel as a small JSON text (Kafka offset metadata, and the
PostgreSQL sink's position row keeps the same fields).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final

from crossfeed.core.timestamps import parse_commit_ts
from crossfeed.wire import grammar, headers

Header = tuple[str, bytes | None]

BEGIN: Final = headers.TYPE_BEGIN.encode()
COMMIT: Final = headers.TYPE_COMMIT.encode()
RESOLVED: Final = headers.TYPE_RESOLVED.encode()
_TYPE: Final = headers.TYPE
_ORDER: Final = headers.ORDER


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """(commit_ts µs, txn id) of a transaction; ordered as the sorter releases them."""

    commit_ts: int
    txn: str

    def describe(self) -> str:
        return f"{self.commit_ts}/{self.txn}" if self.txn or self.commit_ts else "none"


NOTHING: Final = Position(-1, "")
"""Below every transaction: nothing applied yet."""


@dataclass(frozen=True, slots=True)
class Applied:
    """What a sink stores atomically with the data: the applied position and the
    checkpoint_ts (R of the newest resolved mark committed, 0 if none)."""

    position: Position = NOTHING
    checkpoint_ts: int = 0

    def encode(self) -> str:
        """Kafka offset-commit metadata (well below offset.metadata.max.bytes)."""
        return json.dumps(
            {
                "v": 1,
                "ts": self.position.commit_ts,
                "txn": self.position.txn,
                "cp": self.checkpoint_ts,
            },
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, text: str | None) -> Applied:
        """From :meth:`encode`'s text; empty or absent metadata is nothing applied.
        ValueError for metadata that is not ours (someone else's group commit)."""
        if not text:
            return cls()
        try:
            data = json.loads(text)
            return cls(Position(int(data["ts"]), str(data["txn"])), int(data["cp"]))
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(
                f"offset metadata {text[:80]!r} is not a sink position: {err}"
            ) from None


class Kind(Enum):
    BEGIN = "begin"
    DATA = "data"  # a data record of a framed transaction (no crossfeed-order)
    INLINE = "inline"  # a data record with crossfeed-order
    COMMIT = "commit"
    RESOLVED = "resolved"


@dataclass(slots=True)
class Marker:
    """What a record of the sorted stream is, from its headers. Never changed once made;
    not a frozen dataclass only because a frozen one's __init__ costs ~0.5 µs more
    (object.__setattr__ per field), two per source transaction."""

    kind: Kind
    commit_ts: int = 0  # begin/commit/inline: the transaction's; resolved: R
    txn: str = ""  # begin/commit/inline: the transaction id
    count: int = 0  # begin/commit/inline: its data records
    seq: int = 0  # inline: the record's place in its transaction, 1 to count

    @property
    def position(self) -> Position:
        return Position(self.commit_ts, self.txn)

    @property
    def starts(self) -> bool:
        """Whether the record starts a transaction: a ``begin``, or an inline seq 1."""
        return self.kind is Kind.BEGIN or (self.kind is Kind.INLINE and self.seq == 1)


DATA_MARKER: Final = Marker(Kind.DATA)


class BadMarker(ValueError):
    """A begin/commit/resolved record, or an inline data record, whose headers break the
    contract."""


_SORTED_TXN: Final = re.compile(grammar.SORTED_TXN.python().encode())


def split_txn(value: bytes | None) -> tuple[str, int, int]:
    """A marker's ``crossfeed-txn`` ``<txn id>/<seq>/<count>`` -> (txn id, seq, count), by
    the grammar (crossfeed/wire/grammar.py: SORTED_TXN)."""
    match = _SORTED_TXN.fullmatch(value) if value is not None else None
    if match is None:
        text = (value or b"").decode("utf-8", "replace")
        raise BadMarker(f"{headers.TXN} {text!r} is not <txn id>/<seq>/<count>")
    txn, seq, count = match.groups()
    return txn.decode("utf-8", "replace"), int(seq), int(count)


def split_order(value: bytes | None) -> Marker:
    """An inline data record's ``crossfeed-order`` ``<seq>/<count>/<commit_ts>/<txn id>``
    (crossfeed/wire/grammar.py: ORDER) as its marker. Split rather than matched: it is read
    once per change, and this costs a third of a regular expression's time."""
    parts = value.split(b"/", 3) if value is not None else ()
    if len(parts) == 4:
        seq, count, ts, txn = parts
        if (
            seq.isdigit()  # bytes: ASCII digits only
            and count.isdigit()
            and ts.isdigit()
            and len(seq) <= 9
            and len(count) <= 9
            and len(ts) <= grammar.LONG_DIGITS
            and txn
        ):
            seq_n, count_n, ts_n = int(seq), int(count), int(ts)
            if 1 <= seq_n <= count_n and ts_n <= grammar.MAX_LONG:
                return Marker(Kind.INLINE, ts_n, txn.decode("utf-8", "replace"), count_n, seq_n)
    text = (value or b"").decode("utf-8", "replace")
    raise BadMarker(
        f"{headers.ORDER} {text!r} is not <seq>/<count>/<commit_ts>/<txn id> with seq 1..count"
    )


def classify(record_headers: Sequence[Header] | None) -> Marker:
    """The record's kind: a marker when ``crossfeed-type`` says begin/commit/resolved,
    inline data with ``crossfeed-order``, else data of a framed transaction."""
    if not record_headers:
        return DATA_MARKER
    # Most records are data: one pass looking for the type or the order alone (the
    # markers' other headers are read only for a marker).
    for name, value in record_headers:
        if name == _ORDER:
            return split_order(value)
        if name == _TYPE:
            break
    else:
        return DATA_MARKER
    kind_value = commit_value = txn_value = None
    for name, value in record_headers:
        if name == headers.TYPE:
            kind_value = value
        elif name == headers.COMMIT_TS:
            commit_value = value
        elif name == headers.TXN:
            txn_value = value
    if kind_value is None:
        return DATA_MARKER
    if kind_value not in (BEGIN, COMMIT, RESOLVED):
        raise BadMarker(f"{headers.TYPE} {kind_value!r} is not begin, commit or resolved")
    try:
        ts = parse_commit_ts(commit_value)
    except ValueError as err:
        raise BadMarker(str(err)) from None
    if kind_value == RESOLVED:
        return Marker(Kind.RESOLVED, ts)
    txn, seq, count = split_txn(txn_value)
    if seq != 0:
        raise BadMarker(f"a {kind_value.decode()} marker has seq {seq}; expected 0")
    return Marker(Kind.BEGIN if kind_value == BEGIN else Kind.COMMIT, ts, txn, count)


class Step(Enum):
    OPEN = "open"
    APPLY = "apply"
    COMPLETE = "complete"
    CUT_SHORT = "cut_short"
    RESOLVED = "resolved"
    DROP = "drop"
    SKIP_CUT = "skip_cut"


ONLY_APPLY: Final = (Step.APPLY,)
"""What most data records are: :meth:`Sequencer.step` returns this very tuple (test it with
``is``)."""
_APPLY_COMPLETE: Final = (Step.APPLY, Step.COMPLETE)
_DROP: Final = (Step.DROP,)


@dataclass(slots=True)
class OpenTxn:
    """The transaction being applied."""

    position: Position
    begin_offset: int
    count: int
    seen: int = 0


class Sequencer:
    """Decides, record by record, what a sink does with the sorted stream (see module doc).

    ``applied`` moves with each ``COMPLETE`` (the sink persists it at its next commit);
    ``resolved`` is the highest R read. ``known_cut`` holds offsets of records known to
    start a cut-short transaction (a ``begin`` or an inline seq 1: a sink that had to
    rewind says so, and the re-read drops that transaction instead of writing it again).
    """

    def __init__(self, applied: Position = NOTHING, known_cut: Iterable[int] = ()) -> None:
        self.applied = applied
        self.resolved = 0
        self.open: OpenTxn | None = None
        # The transaction the records applied belong to: ``open``, and still the one just
        # completed while the steps of its last inline record are carried out.
        self.applying: OpenTxn | None = None
        self.skipping = False
        self.known_cut: set[int] = set(known_cut)
        self.problem: str | None = None  # the last contract breach seen (for logs)
        self.cut: OpenTxn | None = None  # the transaction the last CUT_SHORT threw away

    def reset(self, applied: Position, known_cut: Iterable[int] = ()) -> None:
        """Back to a committed state (after an abort and a rewind)."""
        self.applied = applied
        self.open = self.applying = None
        self.skipping = False
        self.known_cut |= set(known_cut)

    def forget_cut_below(self, offset: int) -> None:
        """Cut-short starts below a committed offset will never be read again."""
        self.known_cut = {o for o in self.known_cut if o >= offset}

    def data(self) -> bool:
        """:meth:`step` of a data record, for a sink's hot path: True for ``APPLY``,
        False for ``DROP``."""
        if self.open is not None:
            self.open.seen += 1
            return True
        return False  # a replay being skipped, or a record outside begin/commit

    def step(self, offset: int, marker: Marker) -> tuple[Step, ...]:
        kind = marker.kind
        if kind is Kind.INLINE:
            return self._inline(offset, marker)
        if kind is Kind.DATA:
            return ONLY_APPLY if self.data() else _DROP
        if kind is Kind.BEGIN:
            return self._start(offset, marker, "begin")
        if kind is Kind.COMMIT:
            current = self.open
            if current is None:
                self.skipping = False
                return (Step.DROP,)  # the end of a skipped transaction
            if (
                current.position.commit_ts != marker.commit_ts
                or current.position.txn != marker.txn
                or current.seen != marker.count
            ):
                return self._throw_away(
                    f"commit {marker.position.describe()} ({marker.count} records) at offset "
                    f"{offset} does not close the open transaction "
                    f"{current.position.describe()} ({current.seen} records read)"
                )
            self.open = None
            self.applied = current.position
            return (Step.COMPLETE,)
        # resolved: everything up to R is before it in the stream. A transaction still
        # open (or being skipped) here was cut short — the mark follows a whole
        # micro-batch — so the mark is not trusted: the next one will do.
        cut = (
            self._cut_short(f"resolved mark {marker.commit_ts} at offset {offset}")
            if self.open is not None
            else ()
        )
        skipped, self.skipping = self.skipping, False
        if cut or skipped:
            return (*cut, Step.DROP)
        self.resolved = max(self.resolved, marker.commit_ts)
        return (Step.RESOLVED,)

    def _start(self, offset: int, marker: Marker, what: str) -> tuple[Step, ...]:
        """A ``begin``, or an inline seq 1: cuts short a transaction still open, then
        opens this one unless it is known to be cut short or is a replay."""
        position = marker.position
        # (the message is made only when something is cut: a start is per transaction)
        cut = (
            self._cut_short(f"{what} {position.describe()} at offset {offset}")
            if self.open is not None
            else ()
        )
        self.skipping = False
        if offset in self.known_cut:
            self.skipping = True
            return (*cut, Step.SKIP_CUT)
        if position <= self.applied:
            self.skipping = True
            return (*cut, Step.DROP)
        self.open = self.applying = OpenTxn(position, offset, marker.count)
        return (*cut, Step.OPEN)

    def _inline(self, offset: int, marker: Marker) -> tuple[Step, ...]:
        """A data record with its place in its transaction (``crossfeed-order``)."""
        current = self.open
        if marker.seq == 1:
            steps = self._start(offset, marker, "inline change 1 of")
            if steps[-1] is not Step.OPEN:
                return steps
            current = self.open
            assert current is not None
        elif (
            current is None
            or current.seen + 1 != marker.seq
            or current.count != marker.count
            or current.position.commit_ts != marker.commit_ts
            or current.position.txn != marker.txn
        ):
            if current is None:
                # the rest of a replay or of a known cut-short transaction; else a record
                # whose start was never read (the contract has none): nothing to apply
                return _DROP
            return self._throw_away(
                f"inline change {marker.seq}/{marker.count} of {marker.position.describe()} "
                f"at offset {offset} does not follow the open transaction "
                f"{current.position.describe()} ({current.seen} of {current.count} records read)"
            )
        else:
            steps = ()
        current.seen += 1
        if current.seen < current.count:
            return (*steps, Step.APPLY) if steps else ONLY_APPLY  # (no new tuple per change)
        self.open = None
        self.applied = current.position
        return (*steps, *_APPLY_COMPLETE) if steps else _APPLY_COMPLETE

    def _throw_away(self, problem: str) -> tuple[Step, ...]:
        """The open transaction ends here in a way that does not match it: cut short, and
        the record that showed it dropped."""
        self.problem = problem
        self.cut, self.open = self.open, None
        return (Step.CUT_SHORT, Step.DROP)

    def _cut_short(self, why: str) -> tuple[Step, ...]:
        if self.open is None:
            return ()
        self.problem = (
            f"transaction {self.open.position.describe()} begun at offset "
            f"{self.open.begin_offset} cut short by {why}"
        )
        self.cut, self.open = self.open, None
        return (Step.CUT_SHORT,)


# -- the target checked before resuming ---------------------------------------------------


def written_position(record_headers: Sequence[Header] | None) -> Position | None:
    """The transaction an applied data record belongs to, from the headers it keeps in
    the target (``crossfeed-commit-ts``, ``crossfeed-txn``); None for anything else."""
    commit_value = txn_value = None
    for name, value in record_headers or ():
        if name == headers.COMMIT_TS:
            commit_value = value
        elif name == headers.TXN:
            txn_value = value
        elif name == _TYPE:
            return None
    if commit_value is None or txn_value is None:
        return None
    try:
        return Position(parse_commit_ts(commit_value), split_txn(txn_value)[0])
    except ValueError:  # BadMarker included: not a record this sink wrote
        return None


def resume_position(
    applied: Position, committed: Position | None, aborted: Iterable[Position]
) -> Position:
    """The applied position to resume from, with what the target holds: ``applied`` (the
    position committed with the input's offset), ``committed`` (the newest transaction
    whose records a read_committed reader of the target sees; None: none) and
    ``aborted`` (transactions with records in the target no such reader sees).

    A Kafka transaction was once seen committed on one of its partitions and aborted on
    another after a single broker was killed mid-commit (crossfeed/core/resume.py has the
    puller's side): the target's records win where they say more. Past ``applied``: resume
    after them (nothing twice). Aborted ones at or below ``applied`` and past the newest
    committed one: resume after that one, so they are applied again."""
    if committed is not None and committed > applied:
        return committed
    lost = [p for p in aborted if p <= applied and (committed is None or p > committed)]
    if not lost:
        return applied
    return committed if committed is not None else NOTHING
