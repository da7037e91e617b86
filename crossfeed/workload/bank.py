"""The bank workload's model: accounts, transfers and what the target must end up with.

Pure (no I/O): :mod:`crossfeed.workload.run` writes what this builds. Table ``accounts``
(``id`` long primary key, ``balance`` long). Transaction 0 — the opening — inserts every
account with ``initial_balance``; every later transaction moves an amount between two
accounts that live in different partitions (account ``id`` always maps to partition
``id % partitions``, so per-row order holds), as two ``update`` changes with before and
after rows. Transaction ids are ``<run id>-<n>``, n from 0, so a checker knows exactly
which transactions to expect from the summary alone.

Invariants (property tests in tests/unit/workload/test_workload.py):

A. The sum of balances is ``accounts * initial_balance`` after every transaction, and no
   balance ever goes below zero.
B. A transfer's two accounts differ and map to different partitions; each change goes
   to its account's partition.
C. The same seed gives the same transactions.
"""

from __future__ import annotations

import copy
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from crossfeed.client.producer import Change, row_change
from crossfeed.wire.changes import Column, Table

ACCOUNTS = Table(
    "accounts",
    (Column("id", "long", primary_key=True), Column("balance", "long", nullable=False)),
)
MAX_AMOUNT = 100


def partition_of(account: int, partitions: int) -> int:
    """The partition every change of ``account`` goes to."""
    return account % partitions


@dataclass(frozen=True, slots=True)
class Transfer:
    """``amount`` moves from account ``source`` to account ``dest``."""

    txn: str
    source: int
    dest: int
    amount: int


@dataclass
class Bank:
    """The accounts as the workload has written them so far."""

    accounts: int
    partitions: int
    topic: str
    initial_balance: int = 1000
    seed: int | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    balances: list[int] = field(init=False)
    transactions: int = field(init=False, default=0)  # written so far, opening included
    events: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.accounts < 2:
            raise ValueError(f"the bank needs at least 2 accounts, not {self.accounts}")
        if self.partitions < 2:
            raise ValueError(
                f"the bank needs at least 2 partitions (transfers cross partitions), "
                f"not {self.partitions}"
            )
        if self.initial_balance < 1:
            raise ValueError(f"initial balance must be at least 1, not {self.initial_balance}")
        if not self.run_id or any(c in self.run_id for c in "/: "):
            raise ValueError(f"run id {self.run_id!r} must be non-empty, without '/', ':', ' '")
        self.balances = [self.initial_balance] * self.accounts
        self._rng = random.Random(self.seed)

    @property
    def total(self) -> int:
        """The sum every transaction boundary must show."""
        return self.accounts * self.initial_balance

    def txn_id(self, n: int) -> str:
        return f"{self.run_id}-{n}"

    def _change(self, account: int, before: int | None, after: int) -> Change:
        row = {"id": account, "balance": after}
        event = (
            ACCOUNTS.insert(row)
            if before is None
            else ACCOUNTS.update({"id": account, "balance": before}, row)
        )
        return row_change(self.topic, event, partition=partition_of(account, self.partitions))

    def opening(self) -> tuple[str, Sequence[Change]]:
        """Transaction 0: every account inserted with the initial balance (built as it is
        read, so a million accounts are never all in memory)."""
        if self.transactions:
            raise RuntimeError("the opening transaction is the first one")
        self.transactions, self.events = 1, self.accounts
        return self.txn_id(0), _Opening(self)

    def next_transfer(self) -> Transfer:
        """Pick the next transfer and apply it to :attr:`balances`."""
        if not self.transactions:
            raise RuntimeError("write the opening transaction first")
        rng, n, p = self._rng, self.accounts, self.partitions
        while True:
            source = rng.randrange(n)
            dest = rng.randrange(n)
            if source % p == dest % p or self.balances[source] == 0:
                continue  # same partition (or an empty account): pick again
            amount = rng.randint(1, min(MAX_AMOUNT, self.balances[source]))
            break
        transfer = Transfer(self.txn_id(self.transactions), source, dest, amount)
        self.balances[source] -= amount
        self.balances[dest] += amount
        self.transactions += 1
        self.events += 2
        return transfer

    def transfer_changes(self, t: Transfer) -> list[Change]:
        """The two updates of ``t`` (call right after :meth:`next_transfer` returned it)."""
        new_source, new_dest = self.balances[t.source], self.balances[t.dest]
        return [
            self._change(t.source, new_source + t.amount, new_source),
            self._change(t.dest, new_dest - t.amount, new_dest),
        ]

    def changes_ahead(self, count: int) -> list[list[Change]]:
        """The changes of this bank's next ``count`` transfers, built now on a copy: the
        bank itself is unchanged, and its next ``count`` calls of :meth:`next_transfer`
        pick exactly these transfers (the copy starts from the same random state)."""
        twin = copy.deepcopy(self)
        return [twin.transfer_changes(twin.next_transfer()) for _ in range(count)]

    def expected_balances(self) -> dict[int, int]:
        """account id -> balance once everything written so far is applied."""
        return dict(enumerate(self.balances))


class _Opening(Sequence[Change]):
    """The opening's changes, each built when asked for."""

    def __init__(self, bank: Bank) -> None:
        self.bank = bank

    def __len__(self) -> int:
        return self.bank.accounts

    @overload
    def __getitem__(self, index: int) -> Change: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Change]: ...
    def __getitem__(self, index: int | slice) -> Change | Sequence[Change]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return self.bank._change(index % len(self), None, self.bank.initial_balance)


@dataclass(frozen=True)
class Summary:
    """What a bank run wrote (the CLI prints it as one JSON line)."""

    topic: str
    run_id: str
    partitions: int
    accounts: int
    transactions: int  # the opening included
    events: int
    initial_total: int
    first_commit_ts: int
    last_commit_ts: int
    seconds: float
    skew_partition: int | None = None
    skew_ms: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "run_id": self.run_id,
            "partitions": self.partitions,
            "accounts": self.accounts,
            "transactions": self.transactions,
            "events": self.events,
            "initial_total": self.initial_total,
            "first_commit_ts": self.first_commit_ts,
            "last_commit_ts": self.last_commit_ts,
            "seconds": round(self.seconds, 3),
            "transactions_per_s": round(self.transactions / self.seconds, 1)
            if self.seconds > 0
            else None,
            "skew_partition": self.skew_partition,
            "skew_ms": self.skew_ms,
        }

    def txn_ids(self) -> list[str]:
        """Every transaction id the run wrote, in commit order."""
        return [f"{self.run_id}-{n}" for n in range(self.transactions)]

    def txn_counts(self) -> dict[str, int]:
        """txn id -> number of changes (the opening has one per account)."""
        return {txn: self.accounts if n == 0 else 2 for n, txn in enumerate(self.txn_ids())}
