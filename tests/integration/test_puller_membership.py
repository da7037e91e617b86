"""Feed-file pullers share a feed's tasks through the consumer group
``crossfeed-puller.<feed>`` on the target; with ``--instance`` they are static members.

The cases here:

* A second instance joins while the first runs every task, and the first is killed
  (kill -9) and restarted right as the group hands tasks over. With a cooperative
  assignment the hand-over takes two rebalances, and a static member that comes back
  between them is given its cached share without the second one: the tasks on their way
  to the new member were left to nobody while the members kept coming back (a make test
  run copied nothing of them for four minutes). Every task must have an owner again soon.
* A zombie: an instance frozen (SIGSTOP) past its session while copying, woken
  (SIGCONT) after its tasks moved. Its producers are fenced; it drops those tasks and
  stays up, serving ``/status``, and takes tasks again when the other member leaves.
"""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient

from crossfeed.wire import ids
from tests.support.verify import read_many, verify_mirror
from tests.support.workload import ContinuousProducer, produce_mixed

TASKS = 8
SESSION = {"coordinator": {"failover_timeout_s": 6}}  # the group's session.timeout.ms


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


def copying_half(status: dict) -> bool:
    """The instance runs half the tasks (the group settled on two members) and each of
    its partitions has copied something."""
    partitions = status["partitions"].values()
    return len(status["tasks"]) == TASKS // 2 and all(p["next_offset"] > 0 for p in partitions)


def test_a_fenced_puller_stays_up_and_takes_tasks_again_when_another_member_leaves(
    clusters, services, topic_factory
):
    topic = topic_factory(clusters.a, partitions=TASKS)
    feed = services.start_feed(
        "zombie-stays",
        clusters,
        [topic],
        pullers=2,
        config={"staging.partitions": str(TASKS)},
        settings=SESSION,
    )
    zombie, other = feed.pullers
    with ContinuousProducer(clusters.a.config, [topic], 400, partitions=TASKS) as live:
        for puller in (zombie, other):  # both copy: each has transactions open
            puller.wait_status(copying_half, 60, "copying half of the tasks")
        time.sleep(1)
        zombie.pause()  # past its 6 s session: its tasks move to the other member
        other.wait_status(lambda s: len(s["tasks"]) == TASKS, 60, "owning every task")
        time.sleep(2)  # the new owners' producers fence the zombie's
        zombie.resume()
        # Woken, it finds its tasks gone and its producers fenced: it drops them and
        # stays up, answering /status (the group may give it tasks back meanwhile).
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            zombie.assert_alive()
            assert zombie.status() is not None, zombie.failure("/status does not answer")
            time.sleep(0.5)
        assert "fenced" in zombie.log_text(), zombie.failure("never fenced: not the case here")
        assert "Traceback" not in zombie.log_text(), zombie.failure("a traceback")
    first = live.acked

    other.kill()  # it leaves; the zombie, still a member, gets every task
    zombie.wait_status(lambda s: s["tasks"] == list(range(TASKS)), 60, "owning every task")
    more = produce_mixed(clusters.a.config, [topic], TASKS, 2_000, seed=5, abort_every=None)
    expect = len(first) + len(more)
    target = read_many(clusters.b.config, [topic], expect=expect, timeout_s=90)
    verify_mirror(
        read_many(clusters.a.config, [topic]),
        target,
        source_cluster_id=clusters.a.cluster_id,
        target_cluster_id=clusters.b.cluster_id,
    ).assert_ok(feed.logs())
    zombie.assert_alive()
