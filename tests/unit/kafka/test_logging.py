"""librdkafka's own log lines go through Python logging (confluent-kafka's ``logger``) on
every client crossfeed builds, the client library's included, never straight to stderr;
the CLI keeps them out of a command's terminal."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from crossfeed.cli.main import app
from crossfeed.client import consumer as consumer_module
from crossfeed.client.consumer import TimestampedConsumer
from crossfeed.client.producer import ChangeProducer
from crossfeed.kafka import clients


def test_logged_names_a_crossfeed_logger_unless_the_config_has_one() -> None:
    assert clients.logged({"a": 1}, "producer") == {
        "a": 1,
        "logger": logging.getLogger("crossfeed.kafka.producer"),
    }
    mine = logging.getLogger("my.app")
    assert clients.logged({"logger": mine}, "admin")["logger"] is mine
    assert clients.logged({}, "admin", mine)["logger"] is mine
    for made in (clients._merge({}, {}, "consumer"), clients._merge({}, {}, "admin")):
        assert made["logger"].name.startswith("crossfeed.kafka.")


def test_a_change_producers_librdkafka_warning_is_a_log_record_not_a_stderr_line(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG, logger="crossfeed.kafka")
    # A consumer property on a producer: librdkafka warns (CONFWARN, level 4) at once,
    # and no bootstrap.servers means it connects nowhere.
    producer = ChangeProducer({"enable.auto.commit": "false"})
    producer._producer.poll(0.1)  # librdkafka's log queue is served by poll
    warnings = [
        r
        for r in caplog.records
        if r.name == "crossfeed.kafka.producer" and "enable.auto.commit" in r.getMessage()
    ]
    assert warnings and warnings[0].levelno == logging.WARNING
    assert "%4|" not in capfd.readouterr().err


class _Client:
    made: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        self.made.append(conf)


def test_a_timestamped_consumers_three_clients_log_through_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _Client.made = []
    for name in ("AdminClient", "Producer", "Consumer"):
        monkeypatch.setattr(consumer_module, name, _Client)
    monkeypatch.setattr(consumer_module._Recorder, "ensure_topic", lambda self: True)
    TimestampedConsumer({"group.id": "g"})
    assert sorted(conf["logger"].name for conf in _Client.made) == [
        "crossfeed.kafka.admin",
        "crossfeed.kafka.consumer",
        "crossfeed.kafka.producer",
    ]
    _Client.made = []
    mine = logging.getLogger("my.app")
    TimestampedConsumer({"group.id": "g", "logger": mine})
    assert [conf["logger"] for conf in _Client.made] == [mine, mine, mine]


def test_a_cli_command_keeps_librdkafkas_lines_out_of_the_terminal() -> None:
    kafka = logging.getLogger("crossfeed.kafka")
    before = kafka.level
    try:
        kafka.setLevel(logging.NOTSET)
        assert CliRunner().invoke(app, ["version"]).exit_code == 0
        assert kafka.level == logging.CRITICAL
    finally:
        kafka.setLevel(before)


def test_an_expected_fencing_is_a_warning_that_says_why_not_a_critical_line() -> None:
    from crossfeed.log import ExpectedFencing

    def record(name: str, level: int, text: str) -> logging.LogRecord:
        return logging.LogRecord(
            name, level, __file__, 1, "%s [%s] %s", ("FATAL", "p#1", text), None
        )

    fenced = record(
        "crossfeed.kafka.producer",
        logging.CRITICAL,
        "Fatal error: Broker: Producer attempted an operation with an old epoch: "
        "Producer fenced by newer instance",
    )
    assert ExpectedFencing().filter(fenced)
    assert fenced.levelname == "WARNING" and fenced.levelno == logging.WARNING
    assert fenced.getMessage().startswith("fenced: another producer took this")
    assert "old epoch" in fenced.getMessage()  # librdkafka's words are kept
    other = record("crossfeed.kafka.producer", logging.CRITICAL, "Fatal error: out of memory")
    mine = record("my.app", logging.CRITICAL, "I was fenced")
    for kept in (other, mine):
        ExpectedFencing().filter(kept)
        assert kept.levelno == logging.CRITICAL  # anything else stays what it was
