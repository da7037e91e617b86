"""Dead letters: a record that cannot or may not be copied goes to ``_crossfeed.dlq``
with its original key, value and headers plus context headers saying where it came
from and why (docs/design.md, guarantee 8). Like Kafka Connect's DLQ, the value stays the
user's bytes so nothing is lost and it can be replayed as it was."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

Header = tuple[str, str | bytes | None]  # confluent-kafka's header form

FEED: Final = "crossfeed-dlq-feed"
CLUSTER: Final = "crossfeed-dlq-origin-cluster"
TOPIC: Final = "crossfeed-dlq-origin-topic"
PARTITION: Final = "crossfeed-dlq-origin-partition"
OFFSET: Final = "crossfeed-dlq-origin-offset"
STAGE: Final = "crossfeed-dlq-stage"
ERROR_CLASS: Final = "crossfeed-dlq-error-class"
ERROR_MESSAGE: Final = "crossfeed-dlq-error-message"
# SourceRecordsDeleted letters (no key, no value): the first offset after the gap (the
# gap is origin-offset up to it, excluded).
GAP_END: Final = "crossfeed-dlq-gap-end"


@dataclass(frozen=True)
class DeadLetter:
    """Why and where one record failed."""

    feed: str
    cluster_id: str
    topic: str
    partition: int
    offset: int
    stage: str  # puller | sink
    error_class: str  # e.g. RecordTooLarge, RejectedByFilter
    error_message: str

    def headers(self, original: Sequence[Header]) -> list[Header]:
        context: list[Header] = [
            (FEED, self.feed.encode()),
            (CLUSTER, self.cluster_id.encode()),
            (TOPIC, self.topic.encode()),
            (PARTITION, str(self.partition).encode()),
            (OFFSET, str(self.offset).encode()),
            (STAGE, self.stage.encode()),
            (ERROR_CLASS, self.error_class.encode()),
            (ERROR_MESSAGE, self.error_message.encode()),
        ]
        return [*original, *context]

    def describe(self) -> str:
        return (
            f"{self.cluster_id}/{self.topic}/{self.partition}/{self.offset}: "
            f"{self.error_class}: {self.error_message} (stage {self.stage}, feed {self.feed})"
        )


class FeedStopped(RuntimeError):
    """errors.tolerance=none and a record failed: the feed stops with this error."""

    def __init__(self, letter: DeadLetter) -> None:
        super().__init__(f"feed {letter.feed} stopped (errors.tolerance=none): {letter.describe()}")
        self.letter = letter
