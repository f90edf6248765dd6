#!/bin/sh
# Starts Holder.java with Debian's PostgreSQL JDBC driver (scripts/ensure-java-holder.sh installs
# it). exec: the JVM keeps this process's pid, the one the lab freezes and checks. Client VM
# settings for a short-lived process on 2 cores.
#
# Holder.java is compiled once per version of it, into a cache of its own: the JDK's source
# launcher (`java Holder.java`) compiled it in memory at every start — 0.8 s and about a second
# of CPU before the JVM could say HELLO, measured on this 2-core machine, against 0.06 s from
# the compiled class; under a loaded test run that was once more than the lab's 10 s handshake
# wait. Several holders may start at once: each compiles into a directory of its own and the
# first to finish moves it into place.
set -e
here=$(cd "$(dirname "$0")" && pwd)
jar=${LAB_JDBC_JAR:-/usr/share/java/postgresql.jar}
cache=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/fencing-lab/java-holder
classes=$cache/$(cksum <"$here/Holder.java" | cut -d' ' -f1)
if [ ! -f "$classes/Holder.class" ]; then
  mkdir -p "$cache"
  building=$(mktemp -d "$cache/.building.XXXXXX")
  if ! javac -d "$building" -cp "$jar" "$here/Holder.java"; then
    rm -rf "$building"
    echo "holder.sh: javac could not compile $here/Holder.java" >&2
    exit 2
  fi
  mv -T "$building" "$classes" 2>/dev/null || rm -rf "$building"
fi
exec java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xss512k -Xmx64m \
  -cp "$jar:$classes" Holder "$@"
