#!/bin/sh
# Starts CuratorMutex.java, the Curator library holder, on Debian's Curator and PostgreSQL JDBC
# jars (scripts/ensure-library-holders.sh installs libcurator-recipes-java and
# libpostgresql-jdbc-java). Compiled once per version of the file into a cache of its own, as
# examples/holders/java/holder.sh does (several may start at once: each compiles into a
# directory of its own, the first to finish moves it into place). exec: the JVM keeps this
# process's pid, the one the lab freezes — every thread of it, Curator's too.
set -e
here=$(cd "$(dirname "$0")" && pwd)
j=${LAB_JAVA_DIR:-/usr/share/java}
cp=$j/curator-recipes.jar:$j/curator-framework.jar:$j/curator-client.jar:$j/zookeeper.jar:$j/zookeeper-jute.jar:$j/guava.jar:$j/slf4j-api.jar:$j/slf4j-nop.jar:$j/postgresql.jar
for jar in $(echo "$cp" | tr ':' ' '); do
  [ -f "$jar" ] || { echo "curator_mutex.sh: $jar is missing (scripts/ensure-library-holders.sh installs it)" >&2; exit 2; }
done
cache=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/fencing-lab/curator-holder
classes=$cache/$(cksum <"$here/CuratorMutex.java" | cut -d' ' -f1)
if [ ! -f "$classes/CuratorMutex.class" ]; then
  mkdir -p "$cache"
  building=$(mktemp -d "$cache/.building.XXXXXX")
  if ! javac -d "$building" -cp "$cp" "$here/CuratorMutex.java"; then
    rm -rf "$building"
    echo "curator_mutex.sh: javac could not compile $here/CuratorMutex.java" >&2
    exit 2
  fi
  mv -T "$building" "$classes" 2>/dev/null || rm -rf "$building"
fi
exec java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xss512k -Xmx64m -cp "$cp:$classes" CuratorMutex "$@"
