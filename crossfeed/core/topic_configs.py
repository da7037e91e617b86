"""Which topic configs a mirror's target topic takes from its source, and what to change.

A mirror feed's target topic follows its source topic's configs while the feed runs
(every ``puller.config_sync_interval_s``), except those that must differ on a mirror:
``puller.config_sync_exclude``, whose default is MirrorMaker 2's exclude list
(``config.properties.exclude``) plus the two configs that replaced
``message.timestamp.difference.max.ms`` in Kafka 3.6. Why each must differ:

* ``follower/leader.replication.throttled.replicas``: replica ids of the source cluster's
  brokers, meaningless on the target;
* ``message.timestamp.type``: copies keep the source records' timestamps; a target with
  ``LogAppendTime`` would replace them by the time of the copy;
* ``message.timestamp.difference.max.ms`` (``.before.max.ms``, ``.after.max.ms``): copies
  carry the source's timestamps, which may be old by the time they are copied (a backlog,
  a failback) — the target must not refuse them;
* ``unclean.leader.election.enable``, ``min.insync.replicas``: durability of the target
  cluster, set for its own brokers.

Invariants:

A. Only topic-level overrides are compared: a config the source leaves at its broker
   default is not pushed (the target's brokers have their own defaults).
B. ``changes`` never touches an excluded config, in either direction: set at the source or
   by hand on the target, it is left as it is.
C. Every other config ends as the source has it: set to the source's value where the
   target differs, and its target override deleted where the source has none (a hand
   change on the target is overwritten — only for configs the feed syncs). Applying the
   changes to the target's overrides gives the source's synced overrides, and the changes
   of a target that already matches are empty.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_EXCLUDE = (
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "min.insync.replicas",
)


@dataclass(frozen=True)
class Excluded:
    """Config names (or regexes, full match) a mirror never takes from its source."""

    patterns: tuple[str, ...] = DEFAULT_EXCLUDE
    _compiled: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", tuple(re.compile(p) for p in self.patterns))

    @classmethod
    def parse(cls, text: str) -> Excluded:
        """From a comma-separated list; ValueError naming a pattern that does not compile."""
        patterns = tuple(p.strip() for p in text.split(",") if p.strip())
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"{pattern!r} is not a regular expression ({err})") from None
        return cls(patterns)

    def __call__(self, name: str) -> bool:
        return any(p.fullmatch(name) for p in self._compiled)


@dataclass(frozen=True)
class ConfigChanges:
    """What to alter on one target topic: configs to set, overrides to delete."""

    set: dict[str, str]
    delete: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.set or self.delete)

    def applied_to(self, target: Mapping[str, str]) -> dict[str, str]:
        """The target's overrides once these changes are made."""
        out = {k: v for k, v in target.items() if k not in self.delete}
        out.update(self.set)
        return out


def synced(source: Mapping[str, str], excluded: Excluded) -> dict[str, str]:
    """The source overrides a target topic takes (at creation, and while the feed runs)."""
    return {k: v for k, v in source.items() if not excluded(k)}


def changes(
    source: Mapping[str, str], target: Mapping[str, str], excluded: Excluded
) -> ConfigChanges:
    """What makes ``target``'s overrides follow ``source``'s (A, B, C)."""
    wanted = synced(source, excluded)
    to_set = {k: v for k, v in sorted(wanted.items()) if target.get(k) != v}
    to_delete = tuple(sorted(k for k in target if k not in wanted and not excluded(k)))
    return ConfigChanges(to_set, to_delete)
