"""What the quiet pause reads without a broker (services/sorter/quiet.py): where a batch
ended, from Spark's offset log, and which records are resolved marks. The pause itself,
woken by a change, against a real sorter: tests/integration/test_sorter.py."""

from __future__ import annotations

import pytest

from crossfeed.services.sorter.quiet import batch_end, is_mark
from crossfeed.wire import headers, records

pytestmark = pytest.mark.unit

TOPIC = "_crossfeed.f.changes"


def test_batch_end_reads_the_kafka_sources_line(tmp_path):
    # The shape Spark 4 writes: version, batch metadata, then the source's offsets.
    (tmp_path / "7").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n'
        f'{{"{TOPIC}":{{"1":380,"0":373}}}}'
    )
    assert batch_end(tmp_path, 7, TOPIC) == {0: 373, 1: 380}


@pytest.mark.parametrize(
    "content",
    [
        None,
        "",
        "v1\n{}\n",
        'v1\n{}\n{"other":{"0":1}}',
        "v1\n{}\n{not json",
        'v1\n{}\n{"_crossfeed.f.changes":{"x":1}}',
    ],
)
def test_batch_end_unknown_means_none(tmp_path, content):
    if content is not None:
        (tmp_path / "3").write_text(content)
    assert batch_end(tmp_path, 3, TOPIC) is None


def test_marks_and_changes_told_apart():
    assert is_mark(records.resolved_mark_headers(123))
    assert not is_mark([(headers.COMMIT_TS, b"1"), (headers.TXN, b"t:1:1")])
    assert not is_mark(None)
    assert not is_mark([(headers.TYPE, b"something-else")])
