#!/usr/bin/env bash
# Installs the lock libraries the library holders use (holder/libraries/requirements.txt: kazoo,
# redis-py, python-redis-lock, etcd3gw, tooz, psycopg — the real published packages from PyPI,
# pinned) into a virtual environment of their own, target/library-holders/venv, and prints its
# python's path on stdout. Quiet when it is there and matches the requirements (a stamp holds
# the file's checksum); a changed requirements.txt makes it again. Needs python3 with venv
# (Debian: python3-venv, installed with apt-get when missing and this runs as root) and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
req=holder/libraries/requirements.txt
dir=target/library-holders
venv=$dir/venv
stamp=$venv/.requirements.sha256
# The system's python3 first: F16 runs a library holder as a user of its own (the servers'), who
# must be able to run the virtual environment's python — a python under /root (pyenv's) is not
# readable by that user. Its path is part of the stamp: another python makes the venv again.
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3 || true)
want=$( { cat "$req"; echo "$python"; } | sha256sum | cut -d' ' -f1)
# The JVM library (Apache Curator) comes from Debian's packages, as the lab's ZooKeeper does:
# its jars and the PostgreSQL JDBC driver under /usr/share/java; a JDK 17 runs it.
jars=(/usr/share/java/curator-recipes.jar /usr/share/java/postgresql.jar /usr/share/java/slf4j-nop.jar)
missing=0
for jar in "${jars[@]}"; do [ -f "$jar" ] || missing=1; done
if [ "$missing" -eq 1 ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-library-holders: installing libcurator-recipes-java, libpostgresql-jdbc-java and libslf4j-java with apt-get (the Curator holder)" >&2
  export DEBIAN_FRONTEND=noninteractive
  pkgs="libcurator-recipes-java libpostgresql-jdbc-java libslf4j-java"
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $pkgs >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends $pkgs >/dev/null 2>&1; } \
    || true
fi
for jar in "${jars[@]}"; do
  [ -f "$jar" ] || { echo "ensure-library-holders: $jar is missing (apt-get install -y libcurator-recipes-java libpostgresql-jdbc-java libslf4j-java)" >&2; exit 2; }
done
command -v javac >/dev/null 2>&1 || { echo "ensure-library-holders: javac is missing: a JDK 17 or newer runs the Curator holder" >&2; exit 2; }
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$PWD/$venv/bin/python"
  exit 0
fi
[ -n "$python" ] || { echo "ensure-library-holders: python3 not found (apt-get install -y python3 python3-venv)" >&2; exit 2; }
if ! "$python" -m venv --help >/dev/null 2>&1 || ! "$python" -c 'import ensurepip' >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-library-holders: installing python3-venv with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends python3-venv >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends python3-venv >/dev/null 2>&1; } \
      || true
    python=/usr/bin/python3
  fi
fi
echo "ensure-library-holders: installing $(grep -c '^[a-z]' "$req") pinned packages into $venv (from PyPI)" >&2
rm -rf "$venv"
mkdir -p "$dir"
t0=$SECONDS
"$python" -m venv "$venv" >&2 || { echo "ensure-library-holders: $python -m venv failed (apt-get install -y python3-venv)" >&2; exit 2; }
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2; then
  echo "ensure-library-holders: pip could not install $req (is PyPI reachable?)" >&2
  rm -rf "$venv"
  exit 2
fi
"$venv/bin/python" -m pip check >&2 || { echo "ensure-library-holders: the pinned packages conflict (pip check)" >&2; rm -rf "$venv"; exit 2; }
echo "$want" >"$stamp"
echo "ensure-library-holders: ready in $((SECONDS - t0)) s" >&2
echo "$PWD/$venv/bin/python"
