"""Which class archive a JVM of the stack is given (crossfeed/class_archive.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossfeed import class_archive

pytestmark = pytest.mark.unit

CLASSPATH = "/jars/a.jar:/jars/b.jar"


@pytest.fixture
def archives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home whose lib holds the archives (paths.lib_dir prefers the home's)."""
    monkeypatch.setenv("CROSSFEED_HOME", str(tmp_path))
    monkeypatch.delenv(class_archive.RECORD_ENV, raising=False)
    monkeypatch.delenv("CROSSFEED_CLASS_ARCHIVES", raising=False)
    directory = tmp_path / "lib" / "class-archives"
    directory.mkdir(parents=True)
    return directory


def record(directory: Path, kind: str, classpath: str) -> Path:
    (directory / f"{kind}.jsa").write_bytes(b"archive")
    (directory / f"{kind}.key").write_text(class_archive.key(classpath) + "\n")
    return directory / f"{kind}.jsa"


def test_a_recorded_archive_of_the_same_classpath_is_used(archives: Path) -> None:
    archive = record(archives, "broker", CLASSPATH)
    assert class_archive.jvm_options("broker", CLASSPATH) == [f"-XX:SharedArchiveFile={archive}"]


def test_another_classpath_or_kind_gets_none(archives: Path) -> None:
    record(archives, "broker", CLASSPATH)
    assert class_archive.jvm_options("broker", CLASSPATH + ":/jars/c.jar") == []
    assert class_archive.jvm_options("connect", CLASSPATH) == []


def test_no_archive_without_its_key_or_without_its_file(archives: Path) -> None:
    record(archives, "broker", CLASSPATH)
    (archives / "broker.key").unlink()
    assert class_archive.jvm_options("broker", CLASSPATH) == []
    record(archives, "connect", CLASSPATH).unlink()
    assert class_archive.jvm_options("connect", CLASSPATH) == []


def test_switched_off_by_the_environment(archives: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record(archives, "spark-driver", CLASSPATH)
    monkeypatch.setenv("CROSSFEED_CLASS_ARCHIVES", "off")
    assert class_archive.jvm_options("spark-driver", CLASSPATH) == []


def test_while_recording_every_jvm_writes_its_kind_s_archive(
    archives: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record(archives, "broker", CLASSPATH)
    monkeypatch.setenv(class_archive.RECORD_ENV, str(tmp_path / "new"))
    assert class_archive.jvm_options("broker", CLASSPATH) == [
        f"-XX:ArchiveClassesAtExit={tmp_path / 'new' / 'broker.jsa'}"
    ]


def test_an_unknown_kind_is_refused(archives: Path) -> None:
    with pytest.raises(ValueError, match="unknown kind of JVM 'zookeeper'"):
        class_archive.jvm_options("zookeeper", CLASSPATH)
