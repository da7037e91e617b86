"""Secrets by reference and masking (crossfeed/core/secrets.py, pure) and where they apply:
configuration files, feed updates, answers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.config import ConfigError, load_settings
from crossfeed.core import secrets
from crossfeed.core.secrets import MASK, mask_text, masked
from crossfeed.feeds import FeedSpec
from crossfeed.services.coordinator import updates
from crossfeed.services.coordinator.lifecycle import LifecycleError

pytestmark = pytest.mark.unit

passwords = st.text(
    alphabet=st.characters(blacklist_characters="@$", min_codepoint=33, max_codepoint=126),
    min_size=1,
)


@given(password=passwords, user=st.from_regex(r"[a-z]{1,8}", fullmatch=True))
def test_a_uri_password_is_masked_and_the_rest_kept(password, user):
    uri = f"postgresql://{user}:{password}@db.example:5432/app?schema=s"
    shown = mask_text(f"could not connect to {uri}: refused")
    assert f"{user}:{password}@" not in shown or password == MASK
    assert f"postgresql://{user}:{MASK}@db.example:5432/app?schema=s" in shown


def test_password_pairs_and_secret_keys_are_masked_references_are_not():
    assert mask_text("host=db user=u password=hunter2 port=1") == (
        f"host=db user=u password={MASK} port=1"
    )
    props = {
        "sasl.username": "crossfeed",
        "sasl.password": "hunter2",
        "ssl.key.password": "k",
        "sasl.oauthbearer.client.secret": "s",
        "sasl.jaas.config": "x required password='p';",
        "api_token": "t",
        "consumer.sasl.password": "c",
        "nested": {"password": "n", "uri": "postgresql://a:b@h/d"},
        "ref": "${env:DC_A_PASSWORD}",
        "ref.password": "${file:/run/secrets/pw}",
    }
    assert masked(props) == {
        "sasl.username": "crossfeed",
        "sasl.password": MASK,
        "ssl.key.password": MASK,
        "sasl.oauthbearer.client.secret": MASK,
        "sasl.jaas.config": MASK,
        "api_token": MASK,
        "consumer.sasl.password": MASK,
        "nested": {"password": MASK, "uri": f"postgresql://a:{MASK}@h/d"},
        "ref": "${env:DC_A_PASSWORD}",
        "ref.password": "${file:/run/secrets/pw}",
    }
    assert mask_text("postgresql://a:${env:PG}@h/d") == "postgresql://a:${env:PG}@h/d"
    assert (
        mask_text("postgresql://a@h/d and kafka://dc-b/t")
        == "postgresql://a@h/d and kafka://dc-b/t"
    )


def test_references_read_the_environment_and_files_and_name_what_is_missing(tmp_path):
    secret_file = tmp_path / "pw"
    secret_file.write_text("from-a-file\n")
    env = {"PW": "from-env"}

    def read(path: str) -> str:
        return open(path).read()

    assert secrets.resolve("${env:PW}", env, read) == "from-env"
    assert secrets.resolve(f"a-${{file:{secret_file}}}-b", env, read) == "a-from-a-file-b"
    assert secrets.resolve("plain", env, read) == "plain"
    with pytest.raises(secrets.SecretError, match="export NOPE="):
        secrets.resolve("${env:NOPE}", env, read, where="dc-a.sasl.password")
    with pytest.raises(secrets.SecretError, match="cannot be read"):
        secrets.resolve(f"${{file:{tmp_path / 'missing'}}}", env, read)


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CROSSFEED_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CROSSFEED_CONFIG", raising=False)
    monkeypatch.delenv("CROSSFEED_API_TOKEN", raising=False)
    return tmp_path


def test_a_configuration_file_holds_references_not_passwords(isolated, monkeypatch):
    (isolated / "pw").write_text("s3cret\n")
    monkeypatch.setenv("DC_A_PASSWORD", "from-env")
    monkeypatch.setenv("TOKEN_FOR_TEST", "tok")
    (isolated / "crossfeed.yaml").write_text(
        "dc-a.bootstrap.servers: 127.0.0.1:19092\n"
        "dc-a.sasl.password: ${env:DC_A_PASSWORD}\n"
        f"dc-a.ssl.key.password: ${{file:{isolated / 'pw'}}}\n"
        "api_token: ${env:TOKEN_FOR_TEST}\n"
    )
    settings = load_settings()
    assert settings.cluster("dc-a").properties["sasl.password"] == "from-env"
    assert settings.cluster("dc-a").properties["ssl.key.password"] == "s3cret"
    assert settings.api_token == "tok"
    monkeypatch.delenv("DC_A_PASSWORD")
    with pytest.raises(ConfigError, match="DC_A_PASSWORD is not set"):
        load_settings()


def _spec(uri: str, topics: list[str]) -> FeedSpec:
    return FeedSpec.model_validate(
        {"name": "f", "source": "dc-a", "sink-uri": uri, "mode": "ordered", "topics": topics}
    )


def test_an_update_given_the_masked_uri_keeps_the_stored_password():
    stored = _spec("postgresql://app:pwREAL1@h:5432/db?schema=s", ["a"])
    shown = _spec(mask_text(stored.sink_uri), ["a", "b"])
    kept = updates.unmasked(stored, shown)
    assert kept.sink_uri == stored.sink_uri and kept.topics == ["a", "b"]
    assert updates.check_update(stored, kept)
    other = _spec("postgresql://app:pwOTHER2@h:5432/db?schema=s", ["a"])
    assert updates.unmasked(stored, other).sink_uri == other.sink_uri
    with pytest.raises(LifecycleError) as refused:
        updates.check_update(stored, other)
    assert "pwREAL1" not in str(refused.value) and "pwOTHER2" not in str(refused.value)
