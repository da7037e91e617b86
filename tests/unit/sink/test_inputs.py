"""The sink's one input seam (services/sink/inputs.py): a feed's input is chosen once, and
it alone says what differs for Debezium input (the schema store, the decoder)."""

from __future__ import annotations

from typing import Any

import pytest

from crossfeed.feeds import FeedSpec
from crossfeed.services.sink.inputs import DebeziumInput, Input, input_for
from crossfeed.services.sink.postgres.debezium import DebeziumMounter
from crossfeed.services.sink.postgres.decoders import ChangeEventDecoder, DebeziumDecoder

pytestmark = pytest.mark.unit


def _feed(**extra: Any) -> FeedSpec:
    return FeedSpec.model_validate(
        {
            "name": "f",
            "source": "dc-a",
            "sink-uri": "postgresql://u@h:5432/d?schema=public",
            "topics": [r"pg1\.public\..*"],
            "mode": "ordered",
            **extra,
        }
    )


def test_a_feed_gets_its_input_once() -> None:
    assert type(input_for(_feed())) is Input
    assert type(input_for(_feed(input="debezium"))) is DebeziumInput


def test_changeevents_need_no_schemas_and_no_debezium_mounter() -> None:
    def no_mounter() -> DebeziumMounter:
        raise AssertionError("a ChangeEvent feed made a Debezium mounter")

    assert Input().schema_store("f", {}) is None
    assert isinstance(Input().decoder(no_mounter), ChangeEventDecoder)


def test_debezium_input_decodes_with_the_sinks_mounter() -> None:
    mounter = DebeziumMounter(lambda sid: b"", None)
    decoder = DebeziumInput().decoder(lambda: mounter)
    assert isinstance(decoder, DebeziumDecoder)
    assert decoder.mounter is mounter
