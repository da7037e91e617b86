"""The small client library applications and the CLI import (no service code)."""

from crossfeed.client.consumer import TimestampedConsumer, is_watermark, user_headers
from crossfeed.client.producer import Change, ChangeProducer, row_change

__all__ = [
    "Change",
    "ChangeProducer",
    "TimestampedConsumer",
    "is_watermark",
    "row_change",
    "user_headers",
]
