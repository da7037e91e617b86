"""What differs in the sink for a feed's input, chosen once per feed (input_for): for
crossfeed's own ChangeEvents (:class:`Input`) nothing more is read and each value is a
whole ChangeEvent; for Debezium's envelopes (:class:`DebeziumInput`) the changes' Connect
schemas are read from the feed's schemas topic (by reference) and the PostgreSQL sink
maps the envelopes by them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from crossfeed.feeds import FeedSpec
from crossfeed.services.sink.schemas import SchemaStore

if TYPE_CHECKING:
    from crossfeed.services.sink.postgres.debezium import DebeziumMounter
    from crossfeed.services.sink.postgres.decoders import Decoder


class Input:
    """crossfeed's ChangeEvents."""

    def schema_store(self, feed: str, conf: dict[str, Any]) -> SchemaStore | None:
        """Where the changes' schemas are read (None: the values are whole)."""
        return None

    def decoder(self, debezium: Callable[[], DebeziumMounter]) -> Decoder:
        """The PostgreSQL sink's one way from a record to a row change (decoders.py);
        ``debezium``: makes the sink's Debezium mounter."""
        from crossfeed.services.sink.postgres.decoders import ChangeEventDecoder

        return ChangeEventDecoder()


class DebeziumInput(Input):
    """Debezium's envelopes, their Connect schemas kept apart by reference."""

    def schema_store(self, feed: str, conf: dict[str, Any]) -> SchemaStore | None:
        return SchemaStore(feed, conf)

    def decoder(self, debezium: Callable[[], DebeziumMounter]) -> Decoder:
        from crossfeed.services.sink.postgres.decoders import DebeziumDecoder

        return DebeziumDecoder(debezium())


def input_for(feed: FeedSpec) -> Input:
    return DebeziumInput() if feed.input == "debezium" else Input()
