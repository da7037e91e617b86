#!/usr/bin/env bash
# Installs everything crossfeed needs on this machine, idempotently and from caches:
#   1. PostgreSQL server binaries (Debian's postgresql) if initdb is absent;
#   2. the Python virtualenv .venv with the pinned dependencies (constraints.txt);
#   3. the JVM classpaths from Maven Central: Kafka broker/tools/MirrorMaker 2/Connect,
#      Spark's Kafka connector, the Debezium PostgreSQL connector, Apicurio Registry and its
#      Avro converter for Connect (deploy/maven/*/pom.xml).
# A step whose inputs did not change since its last success is skipped (stamp files
# in .crossfeed/lib and .venv), so a warm run takes about a second and works offline.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
LIB="$ROOT/.crossfeed/lib"
mkdir -p "$LIB"
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

# 1. PostgreSQL: only the binaries; crossfeed runs its own instance (crossfeed local up).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then
  say "installing PostgreSQL server binaries (Debian postgresql)"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # Do not create or start the distribution's own cluster on port 5432.
  $SUDO mkdir -p /etc/postgresql-common
  [ -f /etc/postgresql-common/createcluster.conf ] ||
    echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.conf >/dev/null
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi

# 2. Python virtualenv with pinned dependencies.
py_stamp=$(stamp_of pyproject.toml constraints.txt)
if [ ! -f .venv/.stamp ] || [ "$(cat .venv/.stamp)" != "$py_stamp" ]; then
  say "installing Python dependencies into .venv (pinned by constraints.txt)"
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip setuptools wheel
  # every extra (sorter, postgres, coordinator): the tests run every service. pip compiles
  # the bytecode ahead (~20 s): where PYTHONDONTWRITEBYTECODE is set, nothing would cache
  # it later, and every service process would compile its imports again (make test took
  # 22 minutes instead of 19 with --no-compile).
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[all,dev]"
  echo "$py_stamp" > .venv/.stamp
fi

# 3. JVM classpaths. Maven caches in ~/.m2, so this works offline once fetched.
MVN="mvn -q -B"
kafka_stamp=$(stamp_of deploy/maven/kafka/pom.xml)
if [ ! -f "$LIB/kafka.stamp" ] || [ "$(cat "$LIB/kafka.stamp")" != "$kafka_stamp" ] || [ ! -s "$LIB/kafka.classpath" ]; then
  say "resolving Kafka broker, tools and MirrorMaker 2 jars (Maven Central)"
  $MVN -f deploy/maven/kafka/pom.xml dependency:build-classpath \
    -Dmdep.outputFile="$LIB/kafka.classpath" >"$LIB/kafka.mvn.log" 2>&1 ||
    { cat "$LIB/kafka.mvn.log"; echo "setup: could not resolve the Kafka jars" >&2; exit 1; }
  echo "$kafka_stamp" > "$LIB/kafka.stamp"
fi

spark_stamp=$(stamp_of deploy/maven/spark/pom.xml)
if [ ! -f "$LIB/spark.stamp" ] || [ "$(cat "$LIB/spark.stamp")" != "$spark_stamp" ]; then
  say "resolving Spark's Kafka connector jars (Maven Central)"
  rm -rf "$LIB/spark" "$LIB/spark.classpath"
  if $MVN -f deploy/maven/spark/pom.xml dependency:copy-dependencies \
      -DoutputDirectory="$LIB/spark" >"$LIB/spark.mvn.log" 2>&1; then
    ls "$LIB"/spark/*.jar | paste -sd, - > "$LIB/spark.classpath"
  else
    # Not fatal: only the sorter (ordered feeds) needs it; its tests skip with this reason.
    version=$(sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' deploy/maven/spark/pom.xml)
    echo "spark-sql-kafka-0-10_2.13:$version could not be resolved from Maven Central (see $LIB/spark.mvn.log)" > "$LIB/spark.missing"
    say "WARNING: $(cat "$LIB/spark.missing"); the sorter is unavailable"
  fi
  echo "$spark_stamp" > "$LIB/spark.stamp"
fi
debezium_stamp=$(stamp_of deploy/maven/debezium/pom.xml)
if [ ! -f "$LIB/debezium.stamp" ] || [ "$(cat "$LIB/debezium.stamp")" != "$debezium_stamp" ]; then
  say "resolving the Debezium PostgreSQL connector (Maven Central)"
  rm -rf "$LIB/debezium" "$LIB/apicurio.stamp"  # the converter shares its plugin.path: resolved again below
  # Debezium's parent POM names Confluent's repository, which is not reachable here:
  # Maven logs "Unknown host" for it and resolves everything from Maven Central.
  $MVN -f deploy/maven/debezium/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$LIB/debezium/debezium-connector-postgres" >"$LIB/debezium.mvn.log" 2>&1 ||
    { cat "$LIB/debezium.mvn.log"; echo "setup: could not resolve the Debezium connector" >&2; exit 1; }
  echo "$debezium_stamp" > "$LIB/debezium.stamp"
fi
apicurio_stamp=$(stamp_of deploy/maven/apicurio-registry/pom.xml deploy/maven/apicurio-converter/pom.xml)
if [ ! -f "$LIB/apicurio.stamp" ] || [ "$(cat "$LIB/apicurio.stamp")" != "$apicurio_stamp" ]; then
  say "resolving Apicurio Registry and its Avro converter for Connect (Maven Central)"
  rm -rf "$LIB/apicurio-registry" "$LIB/apicurio-download" "$LIB/debezium/apicurio-converter"
  # The registry: a ready-to-run application (runner jar + lib/), unpacked.
  $MVN -f deploy/maven/apicurio-registry/pom.xml dependency:copy-dependencies \
    -DoutputDirectory="$LIB/apicurio-download" >"$LIB/apicurio.mvn.log" 2>&1 ||
    { cat "$LIB/apicurio.mvn.log"; echo "setup: could not resolve Apicurio Registry" >&2; exit 1; }
  mkdir -p "$LIB/apicurio-registry"
  tar xzf "$LIB"/apicurio-download/apicurio-registry-app-*-all.tar.gz -C "$LIB/apicurio-registry"
  rm -rf "$LIB/apicurio-download"
  # The converter: a plugin of its own beside Debezium in the Connect worker's plugin.path.
  $MVN -f deploy/maven/apicurio-converter/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$LIB/debezium/apicurio-converter" >>"$LIB/apicurio.mvn.log" 2>&1 ||
    { cat "$LIB/apicurio.mvn.log"; echo "setup: could not resolve Apicurio's Avro converter" >&2; exit 1; }
  echo "$apicurio_stamp" > "$LIB/apicurio.stamp"
fi
# Apicurio's converter jars carry no ServiceLoader manifest; with this one beside them the
# worker finds every plugin by ServiceLoader (plugin.discovery=service_load) and skips the
# reflective scan of all plugin jars (17-97 s per worker start on a loaded machine).
manifests="$LIB/debezium/apicurio-converter/crossfeed-service-manifests.jar"
if [ ! -f "$manifests" ]; then
  scratch=$(mktemp -d)
  mkdir -p "$scratch/META-INF/services"
  printf '%s\n' io.apicurio.registry.utils.converter.AvroConverter \
    io.apicurio.registry.utils.converter.ExtJsonConverter \
    io.apicurio.registry.utils.converter.SerdeBasedConverter \
    >"$scratch/META-INF/services/org.apache.kafka.connect.storage.Converter"
  jar cf "$manifests" -C "$scratch" META-INF
  rm -rf "$scratch"
fi
# 4. Class archives: each kind of JVM the stack starts (broker, Connect, the sorter's Spark
# driver) maps the classes a first run loaded instead of loading them again, and starts in
# about half the CPU (crossfeed/class_archive.py). Recorded again when the jars or the JDK
# change; without them everything runs as before, only slower to start.
archives_stamp=$( { cat "$LIB/kafka.classpath" "$LIB/spark.classpath" 2>/dev/null; java -version 2>&1; cat .venv/.stamp; } | sha256sum | cut -c1-64)
if [ "${CROSSFEED_CLASS_ARCHIVES:-on}" != off ] && { [ ! -f "$LIB/class-archives.stamp" ] || [ "$(cat "$LIB/class-archives.stamp")" != "$archives_stamp" ]; }; then
  say "recording the JVMs' class archives (a broker, Connect and Spark's driver run once)"
  spark_flag=""
  [ -f "$LIB/spark.missing" ] && spark_flag="--no-spark"
  if .venv/bin/crossfeed local archive-classes $spark_flag; then
    echo "$archives_stamp" > "$LIB/class-archives.stamp"
  else
    say "WARNING: no class archives; the JVMs start without them (slower)"
  fi
fi
say "ready"
