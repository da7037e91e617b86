"""The copying itself, one round at a time on the worker's thread: read a batch of the
source, hand each record to its task's open transaction, and commit the tasks whose
transaction is due on committer threads, overlapping with the next reads."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import KafkaError

from crossfeed.core.task_txn import Next, Outcome
from crossfeed.core.timestamps import commit_interval_ms
from crossfeed.services.puller import metrics
from crossfeed.services.puller.membership import CoordinatorMembership, GroupMembership
from crossfeed.services.puller.task import PullerTask
from crossfeed.services.puller.task_state import FeedContext
from crossfeed.services.puller.tasks import TaskSet
from crossfeed.services.puller.txn_producer import TxnFailure

log = logging.getLogger(__name__)

CONSUME_BATCH = 5000  # records per consume call
READ_WAIT_S = 0.05  # longest a consume call waits for source records


class CopyLoop:
    def __init__(
        self, taskset: TaskSet, membership: GroupMembership | CoordinatorMembership
    ) -> None:
        self.taskset = taskset
        self.reader = taskset.reader
        self.membership = membership
        # Commits run here, overlapping with reading (see PullerTask): one thread per task
        # of a typical instance, as a commit mostly waits on the broker.
        self.committer = ThreadPoolExecutor(max_workers=8, thread_name_prefix="commit")
        # How long a transaction may stay open (commit_interval_ms; each read sets it).
        self.interval_s = taskset.ctx.commit_interval_s
        self.last_metrics = 0.0

    @property
    def ctx(self) -> FeedContext:
        return self.taskset.ctx  # replaced when the feed is updated

    @property
    def tasks(self) -> dict[int, PullerTask]:
        return self.taskset.tasks

    def step(self) -> None:
        self._settle()
        for task in list(self.tasks.values()):
            if task.overfull():  # its commit is slow: wait rather than buffer without end
                self._settle_task(task)
        batch = self.reader.consume(CONSUME_BATCH, self._read_wait())
        # Catching up a backlog: fewer, larger transactions (see commit_interval_ms).
        self.interval_s = interval_s = (
            commit_interval_ms(
                len(batch) >= CONSUME_BATCH,
                batch[-1].timestamp()[1] if batch else -1,
                time.time() * 1000,
                self.ctx.commit_interval_s * 1000,
                self.ctx.backlog_commit_interval_s * 1000,
            )
            / 1000
        )
        route = self.taskset.route.get  # the hot loop: a record at a time
        now = time.monotonic()
        for msg in batch:
            if msg.error():
                if msg.error().code() == KafkaError._AUTO_OFFSET_RESET:
                    self.taskset.gaps.out_of_range(msg.topic(), msg.partition(), msg.offset())
                elif not msg.error().retriable():
                    log.warning("source read error: %s", msg.error())
                continue
            found = route((msg.topic(), msg.partition()))
            if found is not None:
                found[0].add(msg, found[1], now)
        for task in list(self.tasks.values()):
            failure = task.send()
            if failure is not None:
                self._commit_failed(task, failure)
        now = time.monotonic()
        due = [task for task in self.tasks.values() if task.due(now, interval_s)]
        if due:
            self._commit_all(due)
        if now - self.last_metrics >= 1.0:
            self._update_lag()
            self.last_metrics = now

    def _update_lag(self) -> None:
        now_us = time.time() * 1_000_000
        for task, state in self.taskset.route.values():
            _, high = self.reader.watermarks(state.tp, cached=True)
            if high < 0:
                continue
            taken = task.position(state.tp)
            lag = max(0, high - max(taken, self.reader.position(state.tp)))
            metrics.LAG_RECORDS.labels(*state.labels).set(lag)
            age = (now_us - state.last_ts_us) / 1e6 if lag and state.last_ts_us else 0.0
            metrics.LAG_SECONDS.labels(*state.labels).set(max(age, 0.0))

    def _read_wait(self) -> float:
        """How long the next read may wait: librdkafka's consume waits out its whole
        timeout unless the batch fills (5,000 records take 125 ms at 40k/s), and a commit
        due meanwhile would be that late."""
        now = time.monotonic()
        waits = (task.due_in(now, self.interval_s) for task in self.tasks.values())
        return min([READ_WAIT_S, *(max(0.0, w) for w in waits if w is not None)])

    def _commit_all(self, due: list[PullerTask]) -> None:
        """Seal the due tasks' transactions here and commit them on the committer threads
        (each task has its own producer; a commit mostly waits on the broker), while this
        thread goes on reading; :meth:`_settle` picks up the outcomes."""
        for task in due:
            follower = self.ctx.follower
            if follower is not None and task.schema_ids:
                problem = follower.ensure(task.schema_ids)
                if problem is not None:  # never a record on the target without its schema
                    self._commit_failed(task, TxnFailure(Outcome.FAILED, problem))
                    continue
                task.schema_ids.clear()
            positions = self.reader.positions(list(task.partitions))
            failure = task.seal(*positions, self.taskset.known_until())
            if failure is not None:
                self._commit_failed(task, failure)
                continue
            task.pending = self.committer.submit(task.finish)
            task.pending_since = time.monotonic()

    def _settle(self) -> None:
        """Bookkeeping for the commits that have finished."""
        for task in list(self.tasks.values()):
            if task.pending is not None and task.pending.done():
                self._settle_task(task)

    def _settle_task(self, task: PullerTask) -> None:
        assert task.pending is not None
        failure = task.pending.result()  # waits for the commit
        task.pending = task.pending_since = None
        if failure is None:
            task.committed()
            self.taskset.commit_errors.pop(task.staging_partition, None)
            self.taskset.failures.pop(task.staging_partition, None)
        else:
            self._commit_failed(task, failure)

    def _commit_failed(self, task: PullerTask, failure: TxnFailure) -> None:
        """A transaction of ``task`` failed: the task ends here (core/task_txn.py,
        invariant C). Fenced — another owner runs it — it is just dropped; otherwise it
        is started again (membership.poll) after the decision's backoff, with a new
        producer, from its marks on the target."""
        s = task.staging_partition
        decision = task.failed(failure)
        self.taskset.routes.exact |= {
            tp for tp, state in task.partitions.items() if state.route and state.route.exact
        }
        if decision.next is Next.DROP:
            log.warning("%s", failure.detail)
        else:
            metrics.FAILED_TRANSACTIONS.labels(self.ctx.feed.name).inc()
            self.taskset.failures[s] = task.txn.failures
            self.taskset.commit_errors[s] = f"task {s}: {decision.reason}"
            log.warning("task %d: %s", s, decision.reason)
            if decision.backoff_s:
                self.membership.retry_at = max(
                    self.membership.retry_at, time.monotonic() + decision.backoff_s
                )
        self.taskset.drop_task(s, commit=False)
