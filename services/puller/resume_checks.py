"""Where a task resumes: its marks, checked against its copies in the target (a mirror
transaction once committed on the changes partition and not on a target partition,
crossfeed/core/resume.py)."""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

from crossfeed import positions
from crossfeed.core.partitions import TopicPartition
from crossfeed.core.resume import resume_offset
from crossfeed.services.puller.copies import Route

log = logging.getLogger(__name__)

Marks = dict[TopicPartition, positions.Recovered]


class ResumeChecks:
    def __init__(self, target_conf: dict[str, Any], source_cluster_id: str) -> None:
        self.target_conf = target_conf
        self.source_cluster_id = source_cluster_id

    def checked(
        self, s: int, marks: Marks | None, routes: dict[TopicPartition, Route | None]
    ) -> Marks | None:
        """A mirror task's marks, corrected where its copies in the target say otherwise."""
        if not marks:
            return marks
        copies = {
            tp: (route.target_topic, route.partition)
            for tp, route in routes.items()
            if route is not None and tp in marks
        }
        if not copies:
            return marks
        tails = positions.copies_in_tail(self.target_conf, copies, self.source_cluster_id)
        checked = dict(marks)
        for tp, tail in tails.items():
            mark = marks[tp]
            offset = resume_offset(mark.next_offset, tail.committed, tail.aborted)
            if offset != mark.next_offset:
                log.warning(
                    "task %d: %s/%d: the marks say %d, the copies in %s/%d say %d "
                    "(newest committed copy %s, %d aborted); resuming at %d",
                    s,
                    tp.topic,
                    tp.partition,
                    mark.next_offset,
                    *copies[tp],
                    offset,
                    tail.committed,
                    len(tail.aborted),
                    offset,
                )
                checked[tp] = mark._replace(next_offset=offset)
        return checked


def start_offset(tp: TopicPartition, recovered: Marks | None, start: str) -> int:
    """Where ``tp`` is read from: its mark, else the feed's ``start`` (a task that never
    committed) or the partition's start (it appeared after the last commit)."""
    if recovered is None:
        return OFFSET_END if start == "latest" else OFFSET_BEGINNING
    mark = recovered.get(tp)
    return OFFSET_BEGINNING if mark is None else mark.next_offset
