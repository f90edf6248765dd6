#!/usr/bin/env bash
# Makes the example Java holder runnable (examples/holders/java): a JDK's `java` and `javac` (17
# or newer, for text blocks) and Debian's PostgreSQL JDBC driver
# (libpostgresql-jdbc-java, /usr/share/java/postgresql.jar), installed with apt-get when missing
# and this runs as root. Quiet when present; says what to install otherwise.
set -euo pipefail
jar=/usr/share/java/postgresql.jar
if [ ! -f "$jar" ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-java-holder: installing libpostgresql-jdbc-java with apt-get (for the example Java holder)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends libpostgresql-jdbc-java >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends libpostgresql-jdbc-java >/dev/null 2>&1; } \
    || true
fi
[ -f "$jar" ] || { echo "ensure-java-holder: $jar is missing (apt-get install -y libpostgresql-jdbc-java)" >&2; exit 2; }
version=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1) || true
[ "${version:-0}" -ge 17 ] || { echo "ensure-java-holder: a JDK 17 or newer is needed on PATH (java -version says ${version:-nothing})" >&2; exit 2; }
command -v javac >/dev/null 2>&1 || { echo "ensure-java-holder: javac is missing: a JDK (not only a JRE) 17 or newer is needed on PATH" >&2; exit 2; }
