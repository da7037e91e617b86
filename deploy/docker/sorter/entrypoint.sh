#!/bin/bash
# Entrypoint of the crossfeed sorter image (runs under tini).
#
#   driver ARGS...    Spark on Kubernetes: the driver pod (the Spark operator's
#                     spark-submit asks for it); runs spark-submit in client mode here.
#   executor          Spark on Kubernetes: an executor pod; the driver describes it in
#                     SPARK_* environment variables.
#   anything else     the crossfeed command: `sorter run`, `--log-format json sorter run`,
#                     or `spark-class ...` for a standalone master/worker (compose).
set -euo pipefail

case "${1:-}" in
  driver)
    shift
    exec "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client \
      "$@"
    ;;
  executor)
    shift
    # Extra JVM options arrive as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... in order.
    mapfile -t opts < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | cut -d= -f2-)
    classpath="${SPARK_CONF_DIR}:${SPARK_HOME}/jars/*${SPARK_EXTRA_CLASSPATH:+:$SPARK_EXTRA_CLASSPATH}"
    exec "$JAVA_HOME/bin/java" "${opts[@]}" \
      "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}" \
      -cp "$classpath" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" \
      --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" \
      --podName "$SPARK_EXECUTOR_POD_NAME"
    ;;
  spark-class)
    shift
    exec "$SPARK_HOME/bin/spark-class" "$@"
    ;;
  *)
    exec crossfeed "$@"
    ;;
esac
