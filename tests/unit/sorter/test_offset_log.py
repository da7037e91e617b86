"""Spark's offset log as the driver reads it (services/sorter/offset_log.py): where a
micro-batch ends. The files Spark really writes are read by
the sorter's integration tests (its quiet pause: tests/integration/test_sorter.py)."""

from __future__ import annotations

import pytest

from crossfeed.services.sorter.offset_log import batch_end

pytestmark = pytest.mark.unit

TOPIC = "_crossfeed.f.changes"


def _entry(path, batch_id, ends):
    # The shape Spark 4 writes: version, batch metadata, then the source's offsets.
    offsets = ",".join(f'"{p}":{o}' for p, o in ends.items())
    (path / str(batch_id)).write_text(
        f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{{}}}}\n{{"{TOPIC}":{{{offsets}}}}}'
    )


def test_batch_end_reads_the_kafka_sources_line(tmp_path):
    _entry(tmp_path, 7, {1: 380, 0: 373})
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
