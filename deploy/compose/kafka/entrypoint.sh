#!/bin/sh
# Starts one Apache Kafka node configured as the official apache/kafka image is: every
# KAFKA_<NAME> variable is the setting <name> (lower case; `_` is `.`, `__` is `_`,
# `___` is `-`), except KAFKA_HEAP_OPTS and KAFKA_JVM_OPTS, which go to java.
# The storage is formatted at the first start with CLUSTER_ID (a fixed default, as the
# official image's, so a kept data directory starts again).
set -eu
CONFIG=/var/lib/kafka/server.properties
DATA=/var/lib/kafka/data
CLASSPATH="/opt/kafka/libs/*"
LOG4J=-Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties

{
    echo "log.dirs=$DATA"
    env | grep '^KAFKA_' | grep -v '^KAFKA_\(HEAP_OPTS\|JVM_OPTS\)=' \
        | while IFS='=' read -r name value; do
            key=$(echo "${name#KAFKA_}" | tr 'A-Z' 'a-z' \
                | sed -e 's/___/-/g' -e 's/__/\x01/g' -e 's/_/./g' -e 's/\x01/_/g')
            echo "$key=$value"
        done
} > "$CONFIG"

if [ ! -f "$DATA/meta.properties" ]; then
    java -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$CLASSPATH" "$LOG4J" \
        kafka.tools.StorageTool format --ignore-formatted --config "$CONFIG" \
        --cluster-id "${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}"
fi

# shellcheck disable=SC2086  # the options are lists of words
exec java ${KAFKA_HEAP_OPTS:--Xms256m -Xmx1g} \
    ${KAFKA_JVM_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true} \
    -cp "$CLASSPATH" "$LOG4J" kafka.Kafka "$CONFIG"
