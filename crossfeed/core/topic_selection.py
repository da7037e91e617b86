"""Which source topics a changefeed selects, and what they are called on the target.

Invariants:

A. An internal topic (``_crossfeed.*``, or Kafka's ``__*``) is never selected, whatever the
   patterns say.
B. Exclusions win: a topic matched by any ``exclude`` entry is not selected.
C. Otherwise a topic is selected iff some ``include`` entry matches it. An entry made only
   of characters legal in a topic name (``[a-zA-Z0-9._-]``) is a literal name and matches
   only itself (so ``orders.v1`` does not match ``orders_v1``); any other entry is a
   regular expression that must match the whole name (``orders\\..*``, ``(a|b)-events``).
   An empty ``include`` selects nothing.
D. :func:`rename` returns a legal topic name or raises ValueError; with the default
   ``${topic}`` it is the identity.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from crossfeed.wire.topics import is_internal

MAX_TOPIC_LENGTH: Final = 249
TOPIC_PLACEHOLDER: Final = "${topic}"
DEFAULT_RENAME_FORMAT: Final = TOPIC_PLACEHOLDER

_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")


def topic_name_error(name: str) -> str | None:
    """Why ``name`` is not a legal Kafka topic name, or None if it is."""
    if not name:
        return "a topic name must not be empty"
    if name in (".", ".."):
        return f"{name!r} is not allowed as a topic name"
    if len(name) > MAX_TOPIC_LENGTH:
        return f"topic name is {len(name)} characters long; the maximum is {MAX_TOPIC_LENGTH}"
    if not _LEGAL.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL.fullmatch(c)})
        return (
            f"topic name {name!r} contains {''.join(bad)!r}; "
            "only ASCII letters, digits, '.', '_' and '-' are allowed"
        )
    return None


def is_legal_topic_name(name: str) -> bool:
    """True for names Kafka accepts: ``[a-zA-Z0-9._-]``, 1–249 chars, not ``.``/``..``."""
    return topic_name_error(name) is None


class _Patterns:
    """Literal names plus compiled regular expressions (invariant C)."""

    __slots__ = ("literals", "regexes")

    def __init__(self, entries: Sequence[str], what: str) -> None:
        self.literals: frozenset[str] = frozenset(e for e in entries if _LEGAL.fullmatch(e))
        self.regexes: tuple[re.Pattern[str], ...] = tuple(
            _compile(e, what) for e in entries if not _LEGAL.fullmatch(e)
        )

    def matches(self, topic: str) -> bool:
        return topic in self.literals or any(r.fullmatch(topic) for r in self.regexes)


def _compile(entry: str, what: str) -> re.Pattern[str]:
    if not entry:
        raise ValueError(f"empty {what} pattern: give a topic name or a regular expression")
    try:
        return re.compile(entry)
    except re.error as exc:
        raise ValueError(f"invalid {what} pattern {entry!r}: {exc}") from exc


class TopicSelector:
    """Decides which topics a feed copies (see the module invariants)."""

    __slots__ = ("_exclude", "_include", "exclude", "include")

    def __init__(self, include: Sequence[str], exclude: Sequence[str] = ()) -> None:
        self.include: tuple[str, ...] = tuple(include)
        self.exclude: tuple[str, ...] = tuple(exclude)
        self._include = _Patterns(self.include, "include")
        self._exclude = _Patterns(self.exclude, "exclude")

    def __repr__(self) -> str:
        return f"TopicSelector(include={list(self.include)!r}, exclude={list(self.exclude)!r})"

    def selects(self, topic: str) -> bool:
        """True if the feed copies ``topic``."""
        if is_internal(topic) or self._exclude.matches(topic):
            return False
        return self._include.matches(topic)

    def select(self, topics: Iterable[str]) -> list[str]:
        """The selected topics among ``topics``, sorted and without duplicates."""
        return sorted({t for t in topics if self.selects(t)})

    def plan_new_topics(
        self, source_topics: Iterable[str], already_known: Iterable[str]
    ) -> list[str]:
        """Selected source topics not yet replicated by the feed, sorted.

        ``already_known`` holds source topic names (not renamed target names).
        """
        known = set(already_known)
        return [t for t in self.select(source_topics) if t not in known]


def validate_rename_format(rename_format: str) -> None:
    """Refuse a rename format that is unusable for mirroring, saying why.

    It must contain ``${topic}`` (otherwise every topic maps to one name), no other
    ``${...}`` placeholder, and turn a typical name into a legal topic name.
    """
    if TOPIC_PLACEHOLDER not in rename_format:
        raise ValueError(
            f"rename-format {rename_format!r} must contain ${{topic}}; without it every "
            "source topic would be renamed to the same target topic"
        )
    rename("t", rename_format)


def rename(topic: str, rename_format: str = DEFAULT_RENAME_FORMAT) -> str:
    """The target topic name for ``topic``: ``${topic}`` in the format replaced by it.

    Raises ValueError for an unknown placeholder, a result that is not a legal topic name,
    or one that would be an internal topic.
    """
    for match in _PLACEHOLDER.finditer(rename_format):
        if match.group(0) != TOPIC_PLACEHOLDER:
            raise ValueError(
                f"rename-format {rename_format!r}: unknown placeholder {match.group(0)!r}; "
                "only ${topic} is supported"
            )
    result = rename_format.replace(TOPIC_PLACEHOLDER, topic)
    error = topic_name_error(result)
    if error is not None:
        raise ValueError(
            f"rename-format {rename_format!r} gives an illegal topic name for {topic!r}: {error}"
        )
    if is_internal(result):
        raise ValueError(
            f"rename-format {rename_format!r} turns {topic!r} into {result!r}, an internal "
            "topic name (names starting with '_crossfeed.' or '__' are reserved)"
        )
    return result
