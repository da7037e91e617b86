"""What ``crossfeed local up --secure`` writes and which pair later commands act on
(the brokers themselves: tests/integration/test_secured_clusters.py)."""

from __future__ import annotations

import pytest
import yaml

from crossfeed import paths
from crossfeed.local import stack
from crossfeed.local.secure import SecureStack

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("CROSSFEED_HOME", str(tmp_path))
    monkeypatch.setenv("CROSSFEED_LOCAL_PORT_OFFSET", "300")
    return tmp_path


def test_the_secured_configuration_refers_to_the_password_file(home):
    secured = SecureStack.local()
    secured.base.mkdir()
    secured.password_file.write_text("not-in-the-config\n")
    stack.write_local_config(secure_pair=True)
    text = paths.local_config().read_text()
    assert "not-in-the-config" not in text
    config = yaml.safe_load(text)
    dc_a = config["clusters"]["dc-a"]
    assert dc_a == {
        "bootstrap.servers": "127.0.0.1:19394",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "crossfeed",
        "sasl.password": "${file:" + str(home / "secure" / "crossfeed.password") + "}",
        "ssl.ca.location": str(home / "secure" / "certs" / "ca.pem"),
    }
    assert config["clusters"]["dc-b"]["bootstrap.servers"] == "127.0.0.1:29394"
    assert stack.secured()
    assert stack.node("dc-a", secure_pair=True).dir == home / "secure" / "dc-a"


def test_the_last_up_decides_which_pair_stop_and_start_act_on(home):
    assert not stack.secured()  # nothing written yet
    stack.write_local_config(secure_pair=True)
    assert stack.secured()
    stack.write_local_config()
    assert not stack.secured()
    assert stack.node("dc-a") is stack.CLUSTERS[0]


def test_a_secure_node_enforces_acls_for_all_but_its_super_users(home):
    node = SecureStack.local().nodes()[0]
    props = node.server_properties()
    assert "super.users=User:ANONYMOUS;User:crossfeed" in props
    assert "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer" in props
    assert "listeners=PLAINTEXT://127.0.0.1:19395,SASL_SSL://127.0.0.1:19394," in props


def test_a_lost_password_file_is_named_not_replaced(home):
    secured = SecureStack.local()
    (secured.base / "dc-a" / "data").mkdir(parents=True)  # formatted with the old password
    (secured.base / "certs").mkdir()
    secured.certs.ca.write_text("ca")
    secured.certs.server.write_text("server")
    with pytest.raises(RuntimeError, match=r"crossfeed.password is missing, but dc-a already"):
        secured.prepare()
    assert not secured.password_file.exists()


def test_without_openssl_the_certificates_say_what_to_install(home, monkeypatch):
    from crossfeed.local.secure import make_certs

    monkeypatch.setenv("PATH", str(home))  # no openssl here
    with pytest.raises(RuntimeError, match=r"openssl is not installed .*apt-get install openssl"):
        make_certs(home / "certs")
