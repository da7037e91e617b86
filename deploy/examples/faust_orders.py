"""A faust-streaming application that fails over with crossfeed (see docs/failover.md).

It consumes one topic in the consumer group named by its app id, keeps a count per key
in a table (backed by the changelog topic ``<app id>-seen-changelog``) and prints one
line per record: ``<partition> <offset> <key> <value> <count>``.

Everything comes from the environment, so moving it to another data center changes one
variable and nothing else:

    ORDERS_BROKER=kafka://127.0.0.1:19092 ORDERS_TOPIC=orders ORDERS_APP=orders-app \\
        python deploy/examples/faust_orders.py worker -l warn

What crossfeed needs for this app to fail over (docs/failover.md, "Failing over the
consumers people run"): the mirror feed copies the input topic *and* the table's changelog topic
(``<app id>-.*-changelog``); the app id is the consumer group the translator moves; and
``processing_guarantee="exactly_once"``, because faust 0.15.3 in at-least-once mode never
finishes rebuilding a table whose changelog ends in a transaction marker, which is how a
mirrored changelog ends (``ORDERS_GUARANTEE=at_least_once`` shows it).
"""

from __future__ import annotations

import os
import sys

import faust

APP_ID = os.environ.get("ORDERS_APP", "orders-app")
app = faust.App(
    APP_ID,
    broker=os.environ.get("ORDERS_BROKER", "kafka://127.0.0.1:19092"),
    store="memory://",  # rebuilt from the changelog at start, wherever the app runs
    web_enabled=False,
    topic_partitions=int(os.environ.get("ORDERS_PARTITIONS", "8")),
    consumer_auto_offset_reset="earliest",
    processing_guarantee=os.environ.get("ORDERS_GUARANTEE", "exactly_once"),
)
orders = app.topic(
    os.environ.get("ORDERS_TOPIC", "orders"), key_serializer="raw", value_serializer="raw"
)
seen = app.Table("seen", default=int, key_type=bytes, value_type=int)


@app.agent(orders)
async def count(stream: faust.StreamT[bytes]) -> None:
    async for event in stream.events():
        key = event.key or b""
        seen[key] += 1
        message = event.message
        # faust sends print() to its log: write to the real standard output.
        out = sys.__stdout__
        assert out is not None
        out.write(f"{message.partition} {message.offset} {key.decode()} ")
        out.write(f"{event.value.decode()} {seen[key]}\n")
        out.flush()


if __name__ == "__main__":
    sys.argv[0] = "faust_orders"
    app.main()
