"""A first run's translation: a group translated by timestamp while its copies are still in
the first, open transaction of a puller task must not be moved past them.

On brand-new clusters the pullers start late (their transactional ids wait for the
transaction coordinator to load), so a consumer group on the source commits before any
OffsetSync exists and is translated by its consumer timestamp (rules.py, rule 5). The
first transaction of a puller task then holds the whole backlog: a read_committed timestamp
lookup does not see it, and the end offset asked for right after the commit landed lay past
every copy — the group was moved to the end of the partition, and moving only forwards,
never came back: the first ``make demo`` on a new machine skipped ~600 records.
"""

from __future__ import annotations

import time

import pytest

from crossfeed.kafka import clients
from crossfeed.translation import kafka_io

pytestmark = pytest.mark.integration

RECORDS = 50
# An hour ago: records stamped years back would be deleted by the broker's time retention
# (7 days, counted from record timestamps) at its next check, mid-test.
BASE_TS_MS = int(time.time() - 3600) * 1000


def test_timestamp_lookup_never_passes_copies_whose_transaction_commits_meanwhile(
    clusters, topic_factory, unique, monkeypatch
):
    topic = topic_factory(clusters.b)
    producer = clients.producer(
        clusters.b.config, **{"transactional.id": unique("first-txn"), "linger.ms": 0}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for n in range(RECORDS):  # a puller task's first transaction: the whole backlog
        producer.produce(topic, value=b"copy-%d" % n, partition=0, timestamp=BASE_TS_MS + n)
    producer.flush(30)

    # The transaction commits at the worst moment the lookup leaves open: right before
    # the end offset is asked for (a real commit on the real broker, made then).
    end_offsets = kafka_io.end_offsets
    committed: list[bool] = []

    def end_offsets_after_commit(*args, **kwargs):
        if not committed:
            producer.commit_transaction(30)
            committed.append(True)
            deadline = time.monotonic() + 30  # the markers land just after the commit
            while end_offsets(*args, **kwargs).get((topic, 0), 0) <= RECORDS:
                assert time.monotonic() < deadline, "the commit never became visible"
                time.sleep(0.05)
        return end_offsets(*args, **kwargs)

    monkeypatch.setattr(kafka_io, "end_offsets", end_offsets_after_commit)
    admin = kafka_io.ClusterAdmin(clusters.b.config)
    wanted = 20  # the group read copies 0..19; it resumes at the copy stamped ts+20 or before
    found = kafka_io.offset_for_time(admin, (topic, 0), BASE_TS_MS + wanted)
    assert committed, "the lookup never asked for the end offset"
    assert 0 <= found <= wanted, (
        f"a group that consumed up to timestamp +{wanted} was sent to offset {found}, "
        f"past the copies it has not read (at offsets {wanted}..{RECORDS - 1})"
    )
    # Once committed, the same lookup is exact.
    assert kafka_io.offset_for_time(admin, (topic, 0), BASE_TS_MS + wanted) == wanted
