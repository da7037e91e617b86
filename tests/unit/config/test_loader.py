"""Configuration: search order, precedence, pass-through properties, clear errors."""

from __future__ import annotations

import pytest

from crossfeed.config import ConfigError, config_source, load_settings

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CROSSFEED_HOME", str(tmp_path / "home"))
    for var in ("CROSSFEED_CONFIG", "CROSSFEED_SERVER", "CROSSFEED_PULLER__MAX_BATCH_RECORDS"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_defaults_without_any_file(isolated):
    assert config_source() is None
    settings = load_settings()
    assert settings.clusters == {}
    assert settings.server == "http://127.0.0.1:8300"
    assert settings.coordinator.failover_timeout_s == 10.0


def test_search_order(isolated, monkeypatch):
    local = write(isolated / "home" / "local.yaml", "server: http://local:1\n")
    assert config_source() == local
    cwd = write(isolated / "crossfeed.yaml", "server: http://cwd:1\n")
    assert config_source() == cwd
    env = write(isolated / "env.yaml", "server: http://env:1\n")
    monkeypatch.setenv("CROSSFEED_CONFIG", str(env))
    assert config_source() == env
    explicit = write(isolated / "explicit.yaml", "server: http://explicit:1\n")
    assert config_source(explicit) == explicit
    assert load_settings(explicit).server == "http://explicit:1"


def test_missing_explicit_file_is_an_error(isolated):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(isolated / "nope.yaml")


def test_flat_and_nested_cluster_properties_pass_through(isolated):
    write(
        isolated / "crossfeed.yaml",
        "dc-a.bootstrap.servers: 127.0.0.1:19092\n"
        "dc-a.security.protocol: SASL_SSL\n"
        "dc-a.sasl.mechanism: PLAIN\n"
        "clusters:\n  dc-b:\n    bootstrap.servers: 127.0.0.1:29092\n",
    )
    settings = load_settings()
    assert settings.cluster("dc-a").properties == {
        "bootstrap.servers": "127.0.0.1:19092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
    }
    assert settings.cluster("dc-b").client_config(**{"group.id": "g"}) == {
        "bootstrap.servers": "127.0.0.1:29092",
        "group.id": "g",
    }


def test_environment_beats_file_and_merges_sections(isolated, monkeypatch):
    write(isolated / "crossfeed.yaml", "puller:\n  max_batch_records: 5\n  pack_bytes: 7000\n")
    monkeypatch.setenv("CROSSFEED_PULLER__MAX_BATCH_RECORDS", "9")
    settings = load_settings()
    assert settings.puller.max_batch_records == 9
    assert settings.puller.pack_bytes == 7000


def test_explicit_overrides_beat_everything(isolated, monkeypatch):
    monkeypatch.setenv("CROSSFEED_SERVER", "http://env:1")
    assert load_settings(server="http://flag:1").server == "http://flag:1"


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (
            "dc-a.bootstrap.servers: nohost\n",
            ["clusters.dc-a", "bootstrap.servers", "'nohost'", "host:port"],
        ),
        ("clusters:\n  dc-a: {security.protocol: PLAINTEXT}\n", ["bootstrap.servers is missing"]),
        (
            "dc-a.bootstrap.servers: h:1\ndc-a.security.protocol: TLS\n",
            ["security.protocol", "'TLS'", "SASL_SSL"],
        ),
        ("clusters:\n  DC_A: {bootstrap.servers: 'h:1'}\n", ["'DC_A'", "lowercase"]),
        ("puller:\n  max_batch_records: -1\n", ["puller.max_batch_records", "-1", "greater"]),
        ("puller:\n  copy_compression: brotli\n", ["puller.copy_compression", "'brotli'", "lz4"]),
        ("log_format: xml\n", ["log_format", "'xml'", "text", "json"]),
        ("no_such_setting: 1\n", ["no_such_setting", "unknown setting", "known here"]),
        ("control_cluster: dc-z\n", ["control_cluster", "dc-z", "known"]),
        ("- just\n- a list\n", ["must hold a mapping"]),
        ("a: [unclosed\n", ["not valid YAML"]),
    ],
)
def test_bad_configuration_names_field_value_and_fix(isolated, text, fragments):
    write(isolated / "crossfeed.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert "crossfeed.yaml" in message
    for fragment in fragments:
        assert fragment in message


def test_unknown_cluster_alias_lists_known_ones(isolated):
    write(isolated / "crossfeed.yaml", "dc-a.bootstrap.servers: h:1\n")
    with pytest.raises(ConfigError, match=r"unknown cluster alias 'dc-x' \(known: dc-a\)"):
        load_settings().cluster("dc-x")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("puller: {max_batch_record: 5}\n", "puller.max_batch_record = 5: unknown setting"),
        ("sorter:\n  trigger_interval: 5\n", "sorter.trigger_interval = 5: unknown setting"),
        ("pullr: {max_batch_records: 5}\n", "pullr = {'max_batch_records': 5}: unknown setting"),
    ],
)
def test_a_misspelt_key_is_refused_inside_a_section_as_at_the_top(isolated, text, expected):
    write(isolated / "crossfeed.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert expected in message
    assert "known here:" in message


def test_an_unknown_key_lists_the_keys_of_its_own_section(isolated):
    write(isolated / "crossfeed.yaml", "puller: {max_batch_record: 5}\n")
    with pytest.raises(ConfigError, match=r"known here: [a-z_, ]*max_batch_records"):
        load_settings()


def test_a_misspelt_key_in_the_environment_is_refused_too(isolated, monkeypatch):
    monkeypatch.setenv("CROSSFEED_SINK__MAX_BATCH", "3")
    with pytest.raises(ConfigError, match=r"sink\.max_batch = '3': unknown setting; known here: "):
        load_settings()


def test_mirror_copies_are_sent_uncompressed_unless_configured(isolated):
    """Copies compressed with a codec the source's consumers never had to read break them
    on the target (aiokafka without lz4): none by default, the target topic decides."""
    assert load_settings().puller.copy_compression == "none"
    write(isolated / "crossfeed.yaml", "puller:\n  copy_compression: zstd\n")
    assert load_settings().puller.copy_compression == "zstd"


def test_a_directory_given_as_the_configuration_file_is_called_a_directory(isolated):
    folder = isolated / "conf"
    folder.mkdir()
    with pytest.raises(ConfigError) as caught:
        load_settings(folder)
    message = str(caught.value)
    assert f"configuration file {folder} (given by --config) is a directory" in message
    assert "does not exist" not in message


def test_a_directory_in_crossfeed_config_is_called_a_directory(isolated, monkeypatch):
    monkeypatch.setenv("CROSSFEED_CONFIG", str(isolated))
    with pytest.raises(ConfigError, match=r"\(from \$CROSSFEED_CONFIG\) is a directory"):
        config_source()


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_an_empty_configuration_file_is_called_empty(isolated, text):
    path = write(isolated / "crossfeed.yaml", text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert str(caught.value).startswith(f"configuration file {path} is empty:")


def _feed_error(data: dict) -> str:
    from crossfeed.feeds import parse_feed

    base = {"name": "f1", "source": "dc-a", "sink-uri": "kafka://dc-b", "topics": ["t"]}
    with pytest.raises(ConfigError) as caught:
        parse_feed({**base, **data}, "feed file f.yaml")
    return str(caught.value)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"topics": ["ok", "a["]}, "  topics: invalid include pattern 'a[': "),
        ({"exclude": ["(x"]}, "  exclude: invalid exclude pattern '(x': "),
        (
            {"rename-format": "b.${topik}"},
            "  rename-format = 'b.${topik}': rename-format 'b.${topik}': unknown placeholder",
        ),
    ],
)
def test_a_bad_feed_field_is_named_with_its_reason_not_the_whole_feed(data, expected):
    message = _feed_error(data)
    assert message.splitlines()[1].startswith(expected), message
    assert "'name': 'f1'" not in message and "sink-uri" not in message, message


def test_a_check_across_feed_fields_prints_its_reason_alone():
    message = _feed_error({"sink-uri": "kafka://dc-a"})
    assert message.splitlines()[1] == (
        "  source and target are both 'dc-a'; a feed copies between two clusters"
    ), message
