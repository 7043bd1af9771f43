#!/usr/bin/env bash
# Spark (the spark_bridge sources) needs a Java runtime, 17 or 21. Check and say what to do.
set -u
if ! command -v java >/dev/null 2>&1; then
  cat >&2 <<'MSG'
cqlstream: no Java runtime found (needed by Spark for the spark_bridge sources and their tests).
  Debian/Ubuntu:  sudo apt-get install -y openjdk-17-jre-headless
  macOS:          brew install openjdk@17
  or set JAVA_HOME to an installed JDK 17/21 and put $JAVA_HOME/bin on PATH.
The CQL front end and the engine work without Java.
MSG
  exit 1
fi
ver=$(java -version 2>&1 | head -n 1)
major=$(echo "$ver" | sed -E 's/.*version "([0-9]+).*/\1/')
if [ "${major:-0}" -lt 17 ] 2>/dev/null; then
  echo "cqlstream: Java $major found ($ver); Spark 4 needs Java 17 or 21." >&2
  exit 1
fi
echo "java ok: $ver"
