"""The sorter's Spark and Kafka options and its set-up errors (no Spark started)."""

from __future__ import annotations

import pytest

from crossfeed import paths
from crossfeed.config import Settings
from crossfeed.config.settings import SorterSettings
from crossfeed.services.sorter import sparkconf
from crossfeed.services.sorter.segments import FeedLocked, Store

pytestmark = pytest.mark.unit


def test_kafka_options_from_cluster_properties():
    opts = sparkconf.kafka_options(
        {
            "bootstrap.servers": "k1:9092,k2:9092",
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "u",
            "sasl.password": 'p"w',
            "ssl.ca.location": "/etc/ca.pem",
        },
        {"request.timeout.ms": "60000"},
    )
    assert opts["kafka.bootstrap.servers"] == "k1:9092,k2:9092"
    assert opts["kafka.security.protocol"] == "SASL_SSL"
    assert opts["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert "ScramLoginModule required" in opts["kafka.sasl.jaas.config"]
    assert 'password="p\\"w"' in opts["kafka.sasl.jaas.config"]
    assert opts["kafka.ssl.truststore.type"] == "PEM"
    assert opts["kafka.request.timeout.ms"] == "60000"
    assert sparkconf.kafka_options({"bootstrap.servers": "b:1"}, {}) == {
        "kafka.bootstrap.servers": "b:1"
    }


def test_spark_conf_local_defaults_and_overrides(tmp_path, monkeypatch):
    monkeypatch.setenv("CROSSFEED_HOME", str(tmp_path))
    opts = Settings(sorter={"spark_conf": {"spark.sql.shuffle.partitions": "8"}}).sorter
    conf = sparkconf.spark_conf(opts, "f1", ["/x/a.jar", "/x/b.jar"])
    assert conf["spark.master"] == "local[*]"
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.jars"] == "/x/a.jar,/x/b.jar"
    assert conf["spark.local.dir"].startswith(str(tmp_path))
    assert conf["spark.sql.shuffle.partitions"] == "8"  # sorter.spark_conf wins
    remote = Settings(sorter={"spark_master": "spark://m:7077"}).sorter
    assert "spark.driver.host" not in sparkconf.spark_conf(remote, "f1", [])
    assert "spark.pyspark.python" not in sparkconf.spark_conf(remote, "f1", [])
    # no master configured: spark-defaults.conf's, else local[*]
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("# x\nspark.master   spark://sm:7077\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    default = Settings().sorter
    assert sparkconf.spark_conf(default, "f1", [])["spark.master"] == "spark://sm:7077"
    assert not sparkconf.is_local(default)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "none"))
    assert sparkconf.effective_master(default) == "local[*]"
    assert sparkconf.checkpoint_root(opts, "f1") == tmp_path / "sorter" / "f1"


def test_jars_errors_say_what_to_do(tmp_path):
    with pytest.raises(sparkconf.SetupError, match="make setup"):
        sparkconf.jars(tmp_path)
    (tmp_path / "lib").mkdir()
    jar = tmp_path / "lib" / "x.jar"
    jar.write_text("")
    (tmp_path / "lib" / "spark.classpath").write_text(f"{jar}\n")
    assert sparkconf.jars(tmp_path) == [str(jar)]
    (tmp_path / "lib" / "spark.classpath").write_text(f"{jar},/nope.jar\n")
    with pytest.raises(sparkconf.SetupError, match="do not exist"):
        sparkconf.jars(tmp_path)
    (tmp_path / "lib" / "spark.missing").write_text("spark-sql-kafka could not be resolved")
    with pytest.raises(sparkconf.SetupError, match="could not be resolved"):
        sparkconf.jars(tmp_path)


def test_no_java_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(sparkconf.SetupError, match="no Java"):
        sparkconf.check_java()


def test_sorter_settings_from_env(monkeypatch):
    monkeypatch.setenv("CROSSFEED_SORTER__SPARK_MASTER", "spark://m:7077")
    monkeypatch.setenv("CROSSFEED_SORTER__MAX_OFFSETS_PER_TRIGGER", "5000")
    opts = Settings().sorter
    assert opts.spark_master == "spark://m:7077"
    assert opts.max_offsets_per_trigger == 5000


def test_store_state_and_lock(tmp_path):
    from crossfeed.services.sorter.rules import DriverState

    store = Store(tmp_path / "f").open()
    assert store.latest() == DriverState()
    for bid in range(8):
        store.save(DriverState(batch_id=bid, resolved_ts=bid * 10))
    assert store.load_before(5).resolved_ts == 40
    assert store.latest().batch_id == 7
    assert len(list(store.state_dir.glob("*.json"))) == 5  # older states are removed
    with pytest.raises(FeedLocked, match="another sorter"):
        Store(tmp_path / "f").open()
    store.close()
    Store(tmp_path / "f").open().close()


def test_a_second_stack_uses_the_checkouts_jars_unless_it_has_its_own(tmp_path, monkeypatch):
    checkout, second = tmp_path / "checkout", tmp_path / "second"
    (checkout / ".crossfeed" / "lib").mkdir(parents=True)
    shared = checkout / ".crossfeed" / "lib" / "shared.jar"
    shared.write_text("")
    (checkout / ".crossfeed" / "lib" / "spark.classpath").write_text(f"{shared}\n")
    monkeypatch.setattr(paths, "project_root", lambda: checkout)
    monkeypatch.setenv("CROSSFEED_HOME", str(second))
    assert sparkconf.jars() == [str(shared)]
    (second / "lib").mkdir(parents=True)
    (second / "lib" / "spark.missing").write_text("spark-sql-kafka could not be resolved")
    with pytest.raises(sparkconf.SetupError, match="could not be resolved"):
        sparkconf.jars()


def test_read_tasks_small_batches_one_task_big_ones_in_pieces():
    """Defaults: no minimum (a small batch is one task per staging partition, each task
    costing every batch) and a cap per task that cuts a full batch in two."""
    defaults = SorterSettings()
    assert defaults.min_partitions == 0
    assert defaults.max_records_per_read_task * 2 == defaults.max_offsets_per_trigger
    assert sparkconf.read_task_options(25_000, 0) == {"maxRecordsPerPartition": "25000"}
    assert sparkconf.read_task_options(0, 4) == {"minPartitions": "4"}
    assert sparkconf.read_task_options(0, 0) == {}
    assert sparkconf.read_task_options(10, 3) == {
        "maxRecordsPerPartition": "10",
        "minPartitions": "3",
    }
