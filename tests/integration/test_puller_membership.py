"""Feed-file pullers share a feed's tasks through the consumer group
``crossfeed-puller.<feed>`` on the target; with ``--instance`` they are static members.

The case here: a second instance joins while the first runs every task, and the first is
killed (kill -9) and restarted right as the group hands tasks over. With a cooperative
assignment the hand-over takes two rebalances, and a static member that comes back
between them is given its cached share without the second one: the tasks on their way
to the new member were left to nobody while the members kept coming back (a make test
run copied nothing of them for four minutes). Every task must have an owner again soon.
"""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient

from crossfeed.wire import ids
from tests.support.verify import read_many
from tests.support.workload import produce_mixed

TASKS = 8


def _assignments(admin: AdminClient, group: str) -> tuple[str, list[set[int]]]:
    """The group's state and each member's task numbers (partitions of the changes topic)."""
    description = admin.describe_consumer_groups([group])[group].result(timeout=10)
    members = [
        {tp.partition for tp in m.assignment.topic_partitions} if m.assignment else set()
        for m in description.members
    ]
    return str(description.state), members


def test_every_task_has_an_owner_after_a_static_member_dies_during_a_hand_over(
    clusters, services, topic_factory
):
    topic = topic_factory(clusters.a, partitions=TASKS)
    produced = len(produce_mixed(clusters.a.config, [topic], TASKS, 4_000, seed=3))
    feed = services.start_feed(
        "handover", clusters, [topic], config={"staging.partitions": str(TASKS)}
    )
    read_many(clusters.b.config, [topic], expect=produced, timeout_s=60)
    admin = AdminClient(clusters.b.config)
    group = ids.puller_group(feed.name)
    first = feed.pullers[0]

    second = feed.add_puller()
    # Wait for the moment the new member is in the group with nothing yet (the
    # cooperative hand-over under way), a few seconds at most; kill the first then.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        state, members = _assignments(admin, group)
        if "STABLE" in state and len(members) == 2 and any(not m for m in members):
            break
        time.sleep(0.02)
    first.kill()
    first.restart()

    def running() -> list[int]:
        """Tasks the two live pullers run, as their /status lists them."""
        statuses = [p.status() for p in (first, second)]
        return sorted(t for s in statuses if s for t in s.get("tasks", []))

    deadline = time.monotonic() + 30
    while running() != list(range(TASKS)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert running() == list(range(TASKS)), (_assignments(admin, group), feed.logs())

    # The tasks run: records written now are copied, every one.
    more = len(produce_mixed(clusters.a.config, [topic], TASKS, 2_000, seed=4))
    read_many(clusters.b.config, [topic], expect=produced + more, timeout_s=60)
