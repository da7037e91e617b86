"""Consumer-group offset translation across clusters (docs/design.md: guarantee 5, Coordinator).

A group that committed offset ``O`` of a source partition resumes on the destination at
the copy of the record at ``O`` — zero re-reads, zero skips — whenever that record was
replicated; otherwise at the replicated frontier, with the gap counted.

Pure decisions (no I/O, unit- and property-tested):

* :mod:`~crossfeed.translation.scan` — what a range of source offsets holds, as far as
  translation cares (records the feed copies, copies of target records, nothing);
* :mod:`~crossfeed.translation.rules` — the translation of one committed offset;
* :mod:`~crossfeed.translation.books` — the OffsetSync and consumer-timestamp tables folded
  from their compacted topics;
* :mod:`~crossfeed.translation.filters` — which groups and topics are translated;
* :mod:`~crossfeed.translation.rpo` — what a failover loses, per partition (records
  never copied) and per group partition (records a group may read again);
* :mod:`~crossfeed.translation.commit_log` — group commits as the source logs them in
  ``__consumer_offsets`` (Kafka's binary formats) and the latest one per group partition.

I/O: :mod:`~crossfeed.translation.kafka_io` (admin requests, with the librdkafka
caveats they need), :mod:`~crossfeed.translation.reader` (bounded reads),
:mod:`~crossfeed.translation.follow` (tails of compacted topics that survive a cluster
being down), :mod:`~crossfeed.translation.source` (what is known of the source, also
once it is gone), :mod:`~crossfeed.translation.destination` (checkpoints and group
offsets written to the target) and :mod:`~crossfeed.translation.translator` (the
per-feed translator the coordinator leader ticks, and one-shot translation).

The CLI side lives with the CLI: :mod:`crossfeed.cli.translation` and
:mod:`crossfeed.cli.translation_render` (``crossfeed groups translate``, ``failover``,
``failback``, over the coordinator's REST API).

Why not faust-streaming (on the design card for these tables): a faust app is one
asyncio worker bound to one Kafka cluster, whose tables are changelog topics partitioned
by the app's own consumer group. The translator needs the opposite: two clusters (offset
syncs on the target, consumer timestamps on the source), tables that must stay readable
— and be used — while the source cluster is down, admin calls (group offsets, describe,
alter) that faust does not wrap, and ownership decided by the coordinator's lease rather
than by a consumer group. Two plain tails folding into dicts (``follow.py``, ``books.py``)
do that in a few dozen lines, with nothing extra to deploy.
"""
