"""Extras of the crossfeed package: what each brings, and the message when one is missing."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crossfeed import extras
from crossfeed.cli.main import app
from crossfeed.config import ConfigError

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_every_extra_is_declared_in_pyproject_and_all_holds_them():
    declared = PROJECT["optional-dependencies"]
    for extra, modules in extras.EXTRAS.items():
        # Each distribution named in the extra is a module the guard looks for (their
        # import names equal their distribution names), and none is also a base dependency.
        assert _names(declared[extra]) <= set(modules), extra
        assert not _names(declared[extra]) & _names(PROJECT["dependencies"]), extra
    assert declared["all"] == [f"crossfeed[{','.join(extras.EXTRAS)}]"]


def test_the_base_dependencies_hold_no_service_only_package():
    base = _names(PROJECT["dependencies"])
    for heavy in ("pyspark", "pandas", "pyarrow", "psycopg", "fastapi", "uvicorn"):
        assert heavy not in base


def test_missing_message_names_the_extra_to_install():
    assert extras.missing_message("sorter", "the sorter", ["pyspark", "pyarrow"]) == (
        "the sorter needs pyspark, pyarrow, which are not installed: "
        "pip install 'crossfeed[sorter]'"
    )
    assert "psycopg, which is not" in extras.missing_message("postgres", "x", ["psycopg"])


def test_require_raises_a_config_error_for_a_missing_module(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(extras.EXTRAS, "postgres", ("psycopg", "no_such_module_crossfeed"))
    with pytest.raises(ConfigError, match=r"no_such_module_crossfeed, which is not installed"):
        extras.require("postgres", "the PostgreSQL sink")
    with pytest.raises(ValueError, match="unknown extra 'nope'"):
        extras.require("nope", "x")
    extras.require("sorter", "the sorter")  # the dev install has every extra


def test_a_service_started_without_its_extra_says_which_to_install(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setitem(extras.EXTRAS, "sorter", ("no_such_module_crossfeed",))
    result = CliRunner().invoke(app, ["sorter", "run", "--feed", "x"])
    assert result.exit_code == 1
    assert "pip install 'crossfeed[sorter]'" in result.output


def test_the_client_library_and_the_cli_import_no_extra():
    # A fresh interpreter: importing what a plain install runs must not pull in any
    # extra's modules (they would fail there). The wheel test proves it on a real install.
    heavy = sorted({m for modules in extras.EXTRAS.values() for m in modules})
    code = (
        "import sys\n"
        "import crossfeed.client, crossfeed.cli.main\n"
        "import crossfeed.services.puller.main, crossfeed.services.sink.main\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
