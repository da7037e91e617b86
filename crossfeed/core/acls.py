"""Which topic ACLs of the source a mirror's target topics get.

A consumer that fails over to the target needs there the rights it had on the source
topics: the READ and DESCRIBE ACLs (allow or deny) of the topics a feed copies are
copied to their target topics, with the feed's rename applied. WRITE never is: only
crossfeed writes a mirror's target topics. MirrorMaker 2 (``sync.topic.acls.enabled``)
does the same, and it too leaves group ACLs and the ACLs of the target's own users alone.

Invariants:

A. Every rule produced is on a LITERAL target topic name the feed writes, with operation
   READ or DESCRIBE: never WRITE, never a pattern wider than one topic (a source rule on
   ``*`` or on a prefix is copied onto each copied topic it covers, not as a wildcard).
B. ALL on the source grants READ and DESCRIBE on the target (what a consumer needs of it).
C. ``missing`` only adds: a rule already on the target is not asked for again, and a
   rule removed at the source is not removed from the target.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

COPIED = {"READ": ("READ",), "DESCRIBE": ("DESCRIBE",), "ALL": ("READ", "DESCRIBE")}
WILDCARD = "*"


@dataclass(frozen=True, order=True)
class TopicAcl:
    """One ACL on a topic resource, as Kafka names its parts (``User:alice``, ``*``,
    ``READ``, ``ALLOW``, ``LITERAL`` or ``PREFIXED``)."""

    principal: str
    host: str
    operation: str
    permission: str
    pattern: str
    topic: str


def for_targets(source: Iterable[TopicAcl], targets: Mapping[str, str]) -> set[TopicAcl]:
    """The rules the target topics get (A, B): ``targets`` maps each source topic the feed
    copies to its target topic."""
    out: set[TopicAcl] = set()
    for rule in source:
        operations = COPIED.get(rule.operation)
        if operations is None:
            continue
        if rule.pattern == "LITERAL":
            covered = list(targets) if rule.topic == WILDCARD else [rule.topic]
        elif rule.pattern == "PREFIXED":
            covered = [t for t in targets if t.startswith(rule.topic)]
        else:
            continue
        for topic in covered:
            if topic not in targets:
                continue
            for operation in operations:
                out.add(
                    TopicAcl(
                        rule.principal,
                        rule.host,
                        operation,
                        rule.permission,
                        "LITERAL",
                        targets[topic],
                    )
                )
    return out


def missing(wanted: Iterable[TopicAcl], existing: Iterable[TopicAcl]) -> list[TopicAcl]:
    """The wanted rules the target does not have yet, sorted (C)."""
    have = set(existing)
    return sorted(set(wanted) - have)
