"""The local stack's log helpers: the end of a big log is read, not all of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossfeed.local import processes

pytestmark = pytest.mark.unit


def test_tail_reads_the_last_lines_of_a_log_bigger_than_what_it_reads(tmp_path: Path) -> None:
    log = tmp_path / "kafka.log"
    line = "x" * 99 + "\n"
    with open(log, "w") as out:
        for i in range(5_000):  # ~500 KB, well past the bytes tail reads
            out.write(f"{i:05d} {line}")
    assert processes.tail(log, 3).splitlines() == [
        f"{i:05d} {line.strip()}" for i in (4997, 4998, 4999)
    ]
    assert processes.tail(tmp_path / "missing.log") == "(no log yet)"


def test_rotate_keeps_one_older_log_once_it_is_too_big(tmp_path: Path) -> None:
    log = tmp_path / "kafka.log"
    log.write_text("a" * 100)
    processes.rotate(log, max_bytes=1000)
    assert log.read_text() == "a" * 100  # small: kept as it is
    processes.rotate(log, max_bytes=10)
    assert not log.exists() and (tmp_path / "kafka.log.1").read_text() == "a" * 100
    processes.rotate(log, max_bytes=10)  # nothing to rotate: no error
