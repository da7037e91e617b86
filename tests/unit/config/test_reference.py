"""docs/configuration.md holds the settings reference generated from the declarations in
crossfeed/config/settings.py (``make docs`` rewrites it): the page cannot drift."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from crossfeed.cli.main import app
from crossfeed.config import Settings, reference

PAGE = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def test_the_page_holds_the_reference_the_code_declares() -> None:
    page = PAGE.read_text()
    assert reference.updated(page) == page, "run `make docs` and commit docs/configuration.md"


def test_every_setting_has_a_row_with_its_default_and_environment_variable() -> None:
    text = reference.markdown()
    for name, field in Settings.model_fields.items():
        section = field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            assert f"### `{name}:`" in text
            for key, sub in section.model_fields.items():
                row = next(line for line in text.splitlines() if f"| `{name}.{key}` |" in line)
                assert f"`CROSSFEED_{name.upper()}__{key.upper()}`" in row
                assert sub.description and " ".join(sub.description.split()) in row
        else:
            row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
            assert f"`CROSSFEED_{name.upper()}`" in row
    puller = next(line for line in text.splitlines() if "`puller.max_batch_records`" in line)
    assert "| integer (≥ 1) | `10000` |" in puller
    level = next(line for line in text.splitlines() if "`log_level`" in line)
    assert "`DEBUG` \\| `INFO` \\| `WARNING` \\| `ERROR` | `INFO` |" in level


def test_a_page_without_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="markers"):
        reference.updated("# Configuration\n")


def test_crossfeed_settings_prints_and_writes_the_reference(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["settings"], catch_exceptions=False)
    assert out.exit_code == 0 and out.output == reference.markdown()
    page = tmp_path / "configuration.md"
    page.write_text(f"# Settings\n\nabove\n\n{reference.BEGIN}\nstale\n{reference.END}\nbelow\n")
    out = CliRunner().invoke(app, ["settings", "--write", str(page)], catch_exceptions=False)
    assert out.exit_code == 0 and "updated" in out.output
    written = page.read_text()
    assert written.startswith("# Settings\n\nabove\n\n") and written.endswith("\nbelow\n")
    assert "stale" not in written and reference.markdown() in written
    out = CliRunner().invoke(app, ["settings", "--write", str(page)], catch_exceptions=False)
    assert "already current" in out.output and page.read_text() == written
