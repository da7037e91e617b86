"""The quick starts read from the pages as the reader sees them (tests/support/quickstart.py)."""

from __future__ import annotations

import pytest

from tests.support.quickstart import localize, section, steps

pytestmark = pytest.mark.unit


def test_the_readme_quick_starts_are_read_command_by_command() -> None:
    mirror = steps(section("README.md", "Quick start: a mirror feed"))
    assert mirror[0].text == "crossfeed local up"
    assert mirror[2].text == (
        "crossfeed changefeed create orders --source dc-a --sink-uri kafka://dc-b "
        "--topics 'orders.*'"
    )
    assert [s.kind for s in mirror].count("python") == 1
    assert [s.text for s in mirror if s.long_lived] == [
        "crossfeed coordinator run",
        "crossfeed puller run --feed orders",
    ]
    assert mirror[-1].text == "crossfeed failback --feed orders --wait 90"
    cdc = steps(section("README.md", "Quick start: a PostgreSQL database"))
    assert cdc[3].text.endswith(
        "--sink-uri 'postgresql://crossfeed@127.0.0.1:25432/crossfeed?schema=replica'"
    )


def test_the_cdc_page_follows_the_readme_step_for_step() -> None:
    readme = steps(section("README.md", "Quick start: a PostgreSQL database"))
    page = steps(section("docs/cdc.md", "Try it"))
    assert page == readme


def test_ports_move_by_the_offset_and_nothing_else_does() -> None:
    text = "psql postgresql://c@127.0.0.1:25432/db -c 'SELECT 19092' 127.0.0.1:19092"
    assert localize(text, 300) == (
        "psql postgresql://c@127.0.0.1:25732/db -c 'SELECT 19092' 127.0.0.1:19392"
    )
