#!/bin/sh
# Starts Holder.java with Debian's PostgreSQL JDBC driver (scripts/ensure-java-holder.sh installs
# it), compiled in memory by the JDK's source launcher. exec: the JVM keeps this process's pid,
# the one the lab freezes and checks. Client VM settings for a short-lived process on 2 cores.
here=$(dirname "$0")
exec java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xss512k -Xmx64m \
  -cp "${LAB_JDBC_JAR:-/usr/share/java/postgresql.jar}" "$here/Holder.java" "$@"
