"""A stand-in for confluent-kafka's Producer that records what it is asked to write.

For unit tests of code that decides *what* to produce (stamping, watermarks, skew), not
how Kafka behaves. ``produce`` has confluent-kafka's signature, positional or keyword;
each call becomes a dict (``partition`` None when the partitioner would pick).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class RecordingProducer:
    def __init__(self, partitions: int = 2) -> None:
        self.records: list[dict[str, Any]] = []
        self.partitions = partitions

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = -1,
        on_delivery: Any = None,
        callback: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        self.records.append(
            {
                "topic": topic,
                "value": value,
                "key": key,
                "partition": None if partition == -1 else partition,
                "timestamp": timestamp,  # 0: the time of writing
                "headers": headers,
            }
        )

    def list_topics(self, topic: str, timeout: float) -> Any:
        meta = SimpleNamespace(partitions=dict.fromkeys(range(self.partitions)), error=None)
        return SimpleNamespace(topics={topic: meta})

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0
