"""Files that are not UTF-8 text, and where a second stack finds the Kafka jars."""

from __future__ import annotations

import subprocess

import pytest

from crossfeed import paths
from tests.support.cli import run_crossfeed

pytestmark = pytest.mark.unit

LATIN1 = "name: caf\xe9\nsource: dc-a\n".encode("latin-1")  # 0xe9 is not UTF-8 here


def _cli(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_crossfeed(tmp_path / "home", *args, cwd=tmp_path)


def _one_clean_line(run: subprocess.CompletedProcess[str], path) -> None:
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    assert str(path) in lines[0] and "not UTF-8" in lines[0], lines[0]


def test_non_utf8_feed_file_is_one_clean_line(tmp_path):
    bad = tmp_path / "feed.yaml"
    bad.write_bytes(LATIN1)
    _one_clean_line(_cli(tmp_path, "puller", "run", "--feed", "x", "--feed-file", str(bad)), bad)


def test_non_utf8_config_file_is_one_clean_line(tmp_path):
    bad = tmp_path / "crossfeed-latin1.yaml"
    bad.write_bytes(b"log_level: \xff\xfe\n")
    _one_clean_line(_cli(tmp_path, "--config", str(bad), "changefeed", "list"), bad)


def test_second_stack_uses_the_checkouts_jars(tmp_path, monkeypatch):
    """``make setup`` writes the jars to the checkout's .crossfeed/lib; a second stack
    (CROSSFEED_HOME elsewhere, no lib of its own) must find them there."""
    monkeypatch.setenv("CROSSFEED_HOME", str(tmp_path / "second"))
    found = paths.classpath_file("kafka")
    assert found == paths.project_root() / ".crossfeed" / "lib" / "kafka.classpath"
    own = tmp_path / "second" / "lib" / "kafka.classpath"
    own.parent.mkdir(parents=True)
    own.write_text("/elsewhere/kafka.jar")
    assert paths.classpath_file("kafka") == own  # a home with its own jars keeps them
