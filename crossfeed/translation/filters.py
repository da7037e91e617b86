"""Which consumer groups and topics a feed's translator moves (per-feed options).

``translate.groups`` (default ``.*``) and ``translate.groups.exclude`` are regular
expressions over group ids, ``translate.topics.exclude`` one over source topic names;
each must match the whole name. The feed's own topic selection comes first: only
partitions the feed copies can be translated. crossfeed's own groups (``crossfeed-*``)
and Kafka-internal ones (``__*``) are never translated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

INTERNAL_GROUP_PREFIXES: Final = ("crossfeed-", "__")


def _compile(pattern: str | None, what: str) -> re.Pattern[str] | None:
    if pattern is None or pattern == "":
        return None
    try:
        return re.compile(pattern)
    except re.error as err:
        raise ValueError(f"{what} {pattern!r} is not a regular expression: {err}") from None


@dataclass(frozen=True)
class TranslationFilter:
    """Group and topic filters; every pattern must match the whole name."""

    groups: str = ".*"
    groups_exclude: str | None = None
    topics_exclude: str | None = None
    _compiled: tuple[re.Pattern[str] | None, ...] = field(
        init=False, repr=False, compare=False, default=()
    )

    def __post_init__(self) -> None:
        compiled = (
            _compile(self.groups or ".*", "translate.groups"),
            _compile(self.groups_exclude, "translate.groups.exclude"),
            _compile(self.topics_exclude, "translate.topics.exclude"),
        )
        object.__setattr__(self, "_compiled", compiled)

    def group(self, group: str) -> bool:
        """True if ``group`` is translated."""
        include, exclude, _ = self._compiled
        if not group or group.startswith(INTERNAL_GROUP_PREFIXES):
            return False
        if exclude is not None and exclude.fullmatch(group):
            return False
        return include is None or include.fullmatch(group) is not None

    def topic(self, topic: str) -> bool:
        """True unless ``translate.topics.exclude`` matches ``topic``."""
        exclude = self._compiled[2]
        return exclude is None or exclude.fullmatch(topic) is None
