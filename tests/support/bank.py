"""Checking an ordered target against the bank workload (docs/ordered-feeds.md).

Pure apart from Avro decoding: give it the records read from an ordered target in order
(a Kafka target topic read with read_committed, or ``_crossfeed.<feed>.sorted``: records
with a ``crossfeed-type`` header — begin/commit/resolved — are skipped) and the workload's
summary (:class:`crossfeed.workload.bank.Summary` or the JSON line the CLI prints).

:class:`OrderedChecker` takes records one at a time (so a test can check while the feed
runs) and says, in an :class:`OrderedReport`:

* commit order: commit_ts never decreases, and (commit_ts, txn id) strictly increases from
  one transaction to the next (a replayed or reordered transaction breaks that);
* whole transactions: every transaction contiguous, its changes seq 1..count in order
  (``crossfeed-txn``; a change without it is a transaction of one, named from
  its provenance as the sorter does), all with one commit_ts;
* nothing missing, duplicated or unexpected against the summary (txn ids
  ``<run id>-<n>``, the opening with one change per account, transfers with two);
* the sum of balances equals the initial total at every transaction boundary after the
  opening, and :meth:`OrderedChecker.balances` is the final state, to compare with
  ``write_transactions``' expected balances.

:func:`apply_change` applies one ChangeEvent to a dict table (for any table).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from crossfeed.core.provenance import src_of
from crossfeed.core.timestamps import parse_commit_ts
from crossfeed.wire.changes import ChangeEvent, TxnRef, decode_change, parse_txn
from crossfeed.wire.headers import COMMIT_TS, PROV, TXN, TYPE
from tests.support.verify import Report

Tables = dict[str, dict[tuple[Any, ...], dict[str, Any]]]
"""table name -> primary key (values in key order) -> row."""


class AnyRecord(Protocol):
    """What the checker reads of a record (``tests.support.verify.Record`` has it)."""

    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...


def apply_change(tables: Tables, event: ChangeEvent) -> None:
    """Apply one row change to ``tables`` (insert/update: the after row replaces the row;
    delete: the row goes; ddl: the table exists, rows kept)."""
    table = tables.setdefault(event.table, {})
    if event.op == "ddl":
        return
    key = tuple(event.key[c.name] for c in event.columns if c.primary_key)
    if event.op == "delete":
        table.pop(key, None)
    else:
        table[key] = dict(event.after or {})


@dataclass
class OrderedReport(Report):
    """What :class:`OrderedChecker` found (``received``: data records looked at)."""

    name: str = "ordered"
    markers: int = 0  # records with a crossfeed-type header (skipped)
    transactions: int = 0  # complete transactions seen
    expected_transactions: int = 0
    partial: int = 0  # transactions cut short or with changes missing
    not_contiguous: int = 0  # a transaction's changes interleaved with another's
    unbalanced: int = 0  # transaction boundaries where the total was wrong

    COUNTS = (
        "missing",  # expected transactions never seen complete
        "duplicated",  # transactions (or changes) seen again
        "partial",
        "out_of_order",
        "not_contiguous",
        "unbalanced",
        "unexpected",  # transactions the workload did not write
    )

    def counts(self) -> dict[str, int]:
        names = ("received", "markers", "transactions", "expected_transactions", *self.COUNTS)
        return {name: getattr(self, name) for name in names}


@dataclass
class _Block:
    """The changes of one transaction as they arrive, contiguous."""

    txn: str
    commit_ts: int
    count: int
    seqs: list[int] = field(default_factory=list)
    events: list[ChangeEvent] = field(default_factory=list)
    bad: bool = False  # an undecodable change or inconsistent headers


def _expected(summary: Any) -> dict[str, Any]:
    data = summary.as_dict() if hasattr(summary, "as_dict") else dict(summary)
    for name in ("run_id", "transactions", "accounts", "initial_total"):
        if name not in data:
            raise ValueError(f"the bank summary has no {name!r}: {data}")
    return data


class OrderedChecker:
    """Checks records of an ordered target one at a time (see the module docstring).

    Without a summary it checks order, contiguity and completeness only (and keeps the
    tables); with one, also missing/duplicated/unexpected transactions and the total.
    """

    def __init__(self, summary: Any = None, table: str = "accounts") -> None:
        self.report = OrderedReport()
        self.tables: Tables = {}
        self.table = table
        self._block: _Block | None = None
        self._last: tuple[int, str] | None = None  # (commit_ts, txn) of the last block
        self._last_ts = -1
        self._seen: set[str] = set()  # every txn id that had a block
        self._complete: set[str] = set()
        self._sum = 0
        self._expected: dict[str, Any] | None = None
        self._counts: dict[str, int] = {}
        if summary is not None:
            self._expected = _expected(summary)
            run, total = self._expected["run_id"], int(self._expected["transactions"])
            accounts = int(self._expected["accounts"])
            self._counts = {f"{run}-{n}": accounts if n == 0 else 2 for n in range(total)}
            self._opening = f"{run}-0"
            self.report.expected_transactions = total

    # -- feeding -------------------------------------------------------------------------

    def add(self, record: AnyRecord) -> None:
        report = self.report
        hdrs = list(record.headers)
        if any(name == TYPE for name, _ in hdrs):
            report.markers += 1
            return
        report.received += 1
        where = f"record #{report.received}"
        try:
            ts = parse_commit_ts(_header(hdrs, COMMIT_TS))
            ref = self._txn(hdrs)
        except ValueError as err:
            report.problem(f"{where}: {err}")
            report.partial += 1
            return
        if ts < self._last_ts:
            report.out_of_order += 1
            report.problem(f"{where} ({ref.txn}): commit_ts {ts} after {self._last_ts}")
        self._last_ts = max(self._last_ts, ts)
        block = self._block
        if block is None or block.txn != ref.txn or len(block.seqs) >= block.count:
            self._close()
            block = self._block = self._open(ref, ts, where)
        if ts != block.commit_ts or ref.count != block.count:
            block.bad = True
            report.problem(
                f"{where} ({ref.txn}): commit_ts/count {ts}/{ref.count} differ from the "
                f"transaction's {block.commit_ts}/{block.count}"
            )
        block.seqs.append(ref.seq)
        try:
            block.events.append(decode_change(record.value or b""))
        except ValueError as err:
            block.bad = True
            report.problem(f"{where} ({ref.txn}): not a ChangeEvent: {err}")

    def open_partial(self) -> str | None:
        """The transaction read so far only in part (at a moment everything visible was
        read, this is a torn transaction), else None."""
        block = self._block
        if block is None or len(block.seqs) >= block.count:
            return None
        return f"{block.txn}: {len(block.seqs)} of {block.count} changes visible"

    def add_all(self, records: Iterable[AnyRecord]) -> OrderedChecker:
        for record in records:
            self.add(record)
        return self

    @staticmethod
    def _txn(hdrs: list[tuple[str, bytes | None]]) -> TxnRef:
        value = _header(hdrs, TXN)
        if value is not None:
            return parse_txn(value)
        ref = src_of(hdrs)
        if ref is None:
            raise ValueError(f"neither {TXN} nor {PROV}: no transaction to put it in")
        return TxnRef(f"{ref.cluster_id}:{ref.topic}:{ref.partition}:{ref.offset}", 1, 1)

    def _open(self, ref: TxnRef, ts: int, where: str) -> _Block:
        report = self.report
        if ref.txn in self._seen:
            if ref.txn in self._complete:
                report.duplicated += 1
                report.problem(f"{where}: transaction {ref.txn} again (already applied)")
            else:
                report.not_contiguous += 1
                report.problem(f"{where}: transaction {ref.txn} resumes after another one")
        elif self._last is not None and (ts, ref.txn) <= self._last:
            report.out_of_order += 1
            report.problem(
                f"{where}: transaction ({ts}, {ref.txn}) after ({self._last[0]}, {self._last[1]})"
            )
        self._seen.add(ref.txn)
        return _Block(ref.txn, ts, ref.count)

    def _close(self) -> None:
        block, self._block = self._block, None
        if block is None:
            return
        report = self.report
        self._last = max(self._last or (block.commit_ts, block.txn), (block.commit_ts, block.txn))
        want = list(range(1, block.count + 1))
        if block.seqs != want:
            if len(set(block.seqs)) < len(block.seqs):
                report.duplicated += 1
                what = "repeats changes"
            elif sorted(block.seqs) == want:
                report.out_of_order += 1
                what = "has its changes out of order"
            else:
                report.partial += 1
                what = "is incomplete"
            seqs = block.seqs[:12]
            report.problem(f"transaction {block.txn} {what}: seqs {seqs} of {block.count}")
            return
        if block.bad or block.txn in self._complete:
            return
        self._complete.add(block.txn)
        report.transactions += 1
        if self._expected is not None:
            want_count = self._counts.get(block.txn)
            if want_count is None:
                report.unexpected += 1
                report.problem(f"transaction {block.txn} was not written by the workload")
            elif want_count != block.count:
                report.partial += 1
                report.problem(
                    f"transaction {block.txn} has {block.count} changes, expected {want_count}"
                )
        rows = self.tables.setdefault(self.table, {})
        for event in block.events:
            if event.table == self.table and event.op != "ddl":
                key = tuple(event.key[c.name] for c in event.columns if c.primary_key)
                old = rows.get(key)
                self._sum -= int(old.get("balance") or 0) if old else 0
                new = event.after if event.op != "delete" else None
                self._sum += int(new.get("balance") or 0) if new else 0
            apply_change(self.tables, event)
        if self._expected is not None and self._opening in self._complete:
            total = int(self._expected["initial_total"])
            if self._sum != total:
                report.unbalanced += 1
                report.problem(
                    f"after transaction {block.txn}: total balance {self._sum}, not {total}"
                )

    # -- results -------------------------------------------------------------------------

    def finish(self) -> OrderedReport:
        """Close the last transaction and compare with the summary; the report."""
        self._close()
        report = self.report
        if self._expected is not None:
            missing = [t for t in self._counts if t not in self._complete]
            report.missing = len(missing)
            if missing:
                report.problem(f"{len(missing)} transaction(s) never applied, e.g. {missing[:5]}")
        return report

    def balances(self) -> dict[Any, int]:
        """account id -> balance, as the records so far leave the table."""
        rows = self.tables.get(self.table, {})
        return {key[0] if len(key) == 1 else key: row.get("balance") for key, row in rows.items()}


def verify_bank(
    records: Iterable[AnyRecord],
    summary: Any,
    expected_balances: Mapping[int, int] | None = None,
) -> OrderedReport:
    """Check an ordered target's records (in order) against a bank run; with
    ``expected_balances`` also the final state."""
    checker = OrderedChecker(summary).add_all(records)
    report = checker.finish()
    if expected_balances is not None:
        got = checker.balances()
        wrong = {a: (got.get(a), b) for a, b in expected_balances.items() if got.get(a) != b}
        if wrong or len(got) != len(expected_balances):
            report.problem(
                f"final balances differ for {len(wrong)} account(s) (got, expected): "
                f"{dict(list(wrong.items())[:5])}; {len(got)} accounts vs "
                f"{len(expected_balances)}"
            )
    return report


def _header(hdrs: Sequence[tuple[str, bytes | None]], name: str) -> bytes | None:
    for key, value in hdrs:
        if key == name:
            return value
    return None
