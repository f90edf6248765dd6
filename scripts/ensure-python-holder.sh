#!/usr/bin/env bash
# Makes the example Python holder runnable (examples/holders/python): Debian's python3-psycopg,
# installed with apt-get when missing and this runs as root. Quiet when present; says what to
# install otherwise.
set -euo pipefail
# Debian's python3 (/usr/bin/python3): the package installs there, whatever python3 PATH finds.
has() { /usr/bin/python3 -c 'import psycopg' >/dev/null 2>&1; }
if ! has && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-python-holder: installing python3-psycopg with apt-get (for the example Python holder)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends python3-psycopg >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends python3-psycopg >/dev/null 2>&1; } \
    || true
fi
has || { echo "ensure-python-holder: psycopg is missing (apt-get install -y python3-psycopg)" >&2; exit 2; }
