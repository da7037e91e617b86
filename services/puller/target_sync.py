"""Target topics follow their source topics: the configs (core/topic_configs.py) and the
topic ACLs (core/acls.py) of the topics a mirror feed copies (Discovery), synced every
``config_sync_interval_s``; what the target refuses is reported, not an error."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException

from crossfeed.core import acls, topic_configs
from crossfeed.kafka import acls as kafka_acls
from crossfeed.kafka import topics as kafka_topics
from crossfeed.services.puller.discovery import Discovery

log = logging.getLogger(__name__)


class TargetSync:
    def __init__(self, found: Discovery) -> None:
        self.found = found  # the topics copied, and the admin clients of both clusters
        # Target topic -> {config: why} the target refused at the last config sync.
        self.refused: dict[str, dict[str, str]] = {}
        # Topic ACLs the target refused (rule -> why), or why none could be read or made.
        self.acls_refused: dict[acls.TopicAcl, str] = {}
        self.acls_problem: str | None = None

    def sync_configs(self) -> None:
        """Target topics take their source topics' configs (core/topic_configs.py): two
        DescribeConfigs requests and at most one IncrementalAlterConfigs for every topic
        copied. A config the target refuses is left as it is and reported
        (:attr:`refused`, :meth:`config_notices`), the others are changed all the same."""
        if self.found.feed.mode == "ordered":
            return
        targets = self.found.copied()
        if not targets:
            return
        sources = kafka_topics.overridden_configs_of(self.found.source, list(targets))
        current = kafka_topics.overridden_configs_of(self.found.target, list(set(targets.values())))
        wanted: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {}
        for topic, target in targets.items():
            source, now = sources.get(topic), current.get(target)
            if not isinstance(source, dict) or not isinstance(now, dict):
                continue  # deleted meanwhile, or not described: the next round
            change = topic_configs.changes(source, now, self.found.excluded)
            if change:
                wanted[target] = (change.set, change.delete)
        refused = kafka_topics.alter_topic_configs(self.found.target, wanted)
        for target, (to_set, to_delete) in sorted(wanted.items()):
            done = {k: v for k, v in to_set.items() if k not in refused.get(target, {})}
            gone = [k for k in to_delete if k not in refused.get(target, {})]
            if done or gone:
                log.info(
                    "feed %s: target topic %s follows its source: set %s%s",
                    self.found.feed.name,
                    target,
                    done or "nothing",
                    f", removed {gone}" if gone else "",
                )
        for target, why in sorted(refused.items()):
            if self.refused.get(target) != why:
                log.warning(
                    "feed %s: target topic %s refuses configs %s; not synced",
                    self.found.feed.name,
                    target,
                    why,
                )
        self.refused = refused

    def sync_acls(self) -> None:
        """The target topics get the READ and DESCRIBE ACLs of their source topics
        (core/acls.py): two DescribeAcls requests and at most one CreateAcls. Nothing
        happens where either cluster has no authorizer; what the target refuses is left
        out and reported (:meth:`acl_notices`), not an error."""
        if self.found.feed.mode == "ordered":
            return
        targets = self.found.copied()
        try:
            source = kafka_acls.topic_acls(self.found.source)
            target = kafka_acls.topic_acls(self.found.target) if source is not None else None
        except KafkaException as err:
            problem = f"topic ACLs not copied: cannot read them ({err.args[0].str()})"
            if problem != self.acls_problem:
                log.warning("feed %s: %s", self.found.feed.name, problem)
            self.acls_problem = problem
            return
        self.acls_problem = None
        if source is None or target is None:
            return  # no authorizer on one side: no ACLs to copy, or none to make
        need = acls.missing(acls.for_targets(source, targets), target)
        refused = kafka_acls.create_topic_acls(self.found.target, need)
        for rule in need:
            if rule not in refused:
                log.info(
                    "feed %s: ACL copied to target topic %s: %s %s %s from %s",
                    self.found.feed.name,
                    rule.topic,
                    rule.permission,
                    rule.operation,
                    rule.principal,
                    rule.host,
                )
        for rule, why in sorted(refused.items()):
            if self.acls_refused.get(rule) != why:
                log.warning("feed %s: %s", self.found.feed.name, _acl_refused(rule, why))
        self.acls_refused = refused

    def config_notices(self) -> list[str]:
        return [
            f"target topic {target} refuses config {key} from its source ({why}); not synced"
            for target, why in sorted(self.refused.items())
            for key in sorted(why)
        ]

    def acl_notices(self) -> list[str]:
        out = [_acl_refused(rule, why) for rule, why in sorted(self.acls_refused.items())]
        if self.acls_problem:
            out.append(self.acls_problem)
        return out


def _acl_refused(rule: acls.TopicAcl, why: str) -> str:
    return (
        f"target topic {rule.topic} refuses ACL {rule.permission} {rule.operation} for "
        f"{rule.principal} from {rule.host} ({why}); not copied"
    )
