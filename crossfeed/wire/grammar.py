"""The ordered feed's header and key grammar, with one set of bounds (docs/ordered-feeds.md
§1-§3): ``crossfeed-commit-ts``, ``crossfeed-txn`` (of a change, and of a marker in
``.sorted``), ``crossfeed-prov`` (and the legacy ``crossfeed-src``) and a resolved mark's
key. Each pattern is written once here, as its fields; the forms the readers need are
derived from it: Python's ``re`` (the change producer, the puller, the sinks, provenance),
Java's (Spark SQL's ``rlike`` in the sorter's Spark release) and RE2's (pyarrow, the
sorter's driver release). The bounds are
the columns the sorter keeps them in: seq, count and a partition are 32-bit (at most 9
digits), commit_ts and an offset 64-bit (19 digits, at most :data:`MAX_LONG`, which a
pattern cannot say: readers compare the digits too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

MAX_LONG: Final = 2**63 - 1
"""The largest commit_ts or offset (a signed 64-bit integer, like Kafka's timestamps)."""
LONG_DIGITS: Final = len(str(MAX_LONG))

TXN_ID: Final = r"[!-.0-9;-~]+"
"""A transaction id: non-empty printable ASCII without space, '/' (0x2f) or ':' (0x3a)
(':' joins the fields of the txn id of a change without ``crossfeed-txn``)."""
INT: Final = r"[0-9]{1,9}"  # seq, count, a partition: 32-bit columns in the sorter
MAX_COUNT: Final = 10**9 - 1  # the most changes of one transaction (what INT admits)
LONG: Final = rf"[0-9]{{1,{LONG_DIGITS}}}"  # commit_ts, an offset: at most MAX_LONG as well
CLUSTER_ID: Final = r"[^/]*"  # empty when the source cluster has none
TOPIC: Final = r"[^/]+"
HOP: Final = r"[^,/]*"  # a cluster.id in a hop list (empty when the cluster has none)
EARLIER_HOPS: Final = r"(?:[^,/]+,)*"  # the hops before the last one, each with its ','


@dataclass(frozen=True)
class Pattern:
    """Fields joined by '/', the whole value and nothing else (no trailing newline).
    ``head``, when set, is a field right before the first one (no '/' between them);
    ``optional_tail`` a last field that may follow, after a '/'."""

    fields: tuple[tuple[str, str], ...]  # (group name, field pattern)
    head: tuple[str, str] | None = None
    optional_tail: tuple[str, str] | None = None

    def python(self) -> str:
        """For ``re.fullmatch``, with named groups."""
        return self._joined(lambda name, field: f"(?P<{name}>{field})")

    def java(self) -> str:
        """For Spark SQL's ``rlike`` (which finds a match anywhere, hence ^), with numbered
        groups; ``\\z``, not ``$``, which in Java also matches before a final line end."""
        return "^" + self._joined(lambda _, field: f"({field})") + r"\z"

    def _joined(self, group: Callable[[str, str], str]) -> str:
        text = "/".join(group(*field) for field in self.fields)
        if self.head is not None:
            text = group(*self.head) + text
        if self.optional_tail is not None:
            text += f"(?:/{group(*self.optional_tail)})?"
        return text

    def re2(self) -> str:
        """For pyarrow's ``extract_regex`` and ``match_substring_regex``: named groups."""
        return "^" + self.python() + r"\z"


COMMIT_TS: Final = Pattern((("ts", LONG),))
"""``crossfeed-commit-ts``: decimal microseconds."""
TXN: Final = Pattern((("id", TXN_ID), ("seq", INT), ("count", INT)))
"""``crossfeed-txn``: ``<txn id>/<seq>/<count>``."""
PROV: Final = Pattern(
    (("cluster", HOP), ("topic", TOPIC), ("partition", INT), ("offset", LONG)),
    head=("earlier", EARLIER_HOPS),
    optional_tail=("origin_topic", TOPIC),
)
"""``crossfeed-prov``: ``<hops>/<topic>/<partition>/<offset>[/<origin topic>]``. The hops
are comma-separated cluster.ids, oldest first; the last (group ``cluster``) is the cluster
of the source record, which ``topic``/``partition``/``offset`` name, so the groups
``cluster``, ``topic``, ``partition`` and ``offset`` are those of :data:`SRC`. The origin
topic is there only when it is not ``topic``."""
SRC: Final = Pattern(
    (("cluster", CLUSTER_ID), ("topic", TOPIC), ("partition", INT), ("offset", LONG))
)
"""Legacy ``crossfeed-src`` (read, no longer written): ``<cluster.id>/<topic>/<partition>/
<offset>`` of the source record."""
SORTED_TXN: Final = Pattern((("id", r"[^/]+"), ("seq", INT), ("count", INT)))
"""``crossfeed-txn`` of a begin/commit marker in ``.sorted``: ``<txn id>/0/<count>``. The
txn id is a :data:`TXN_ID`, or for a change without ``crossfeed-txn`` the source record's
cluster.id, topic, partition and offset (:data:`PROV`, or a legacy :data:`SRC`) joined by
':' (a cluster.id or topic may hold ':' too); a reader of markers only compares ids, so
it takes any id without '/' (a seq other than 0 is its to refuse, with its reason)."""
ORDER: Final = Pattern(
    (("seq", INT), ("count", INT), ("commit_ts", LONG), ("id", r"[^/]+")),
)
"""``crossfeed-order`` of a data record in ``.sorted``: ``<seq>/<count>/<commit_ts>/<txn id>``,
seq from 1 to count; the txn id as in :data:`SORTED_TXN` (last, so a reader splits the
value at its first three '/')."""
MARK_KEY: Final = Pattern((("topic", TOPIC), ("partition", INT)))
"""A resolved mark's key in ``.changes``: ``<topic>/<partition>`` of its source partition."""


def fits_long(digits: str) -> bool:
    """``digits`` (matched by :data:`LONG`) is at most :data:`MAX_LONG`."""
    return len(digits) < LONG_DIGITS or int(digits) <= MAX_LONG
