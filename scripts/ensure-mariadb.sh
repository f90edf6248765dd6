#!/usr/bin/env bash
# Makes MariaDB available for the U-series (U1–U5) when it can: if the server (mariadbd) is
# missing and this runs as root with apt-get, installs the Debian package mariadb-server.
# Prints the cargo feature flag to build with on stdout: "--features lab/mariadb" when MariaDB is
# there, nothing when it is not (the U scenarios are then reported as skipped, with the hint).
set -euo pipefail

has_mariadb() { command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; }

if ! has_mariadb && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-mariadb: MariaDB not found; installing mariadb-server with apt-get (for the U-series)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends mariadb-server >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends mariadb-server >/dev/null 2>&1; } \
    || echo "ensure-mariadb: could not install mariadb-server; the U-series will be skipped" >&2
fi
if has_mariadb; then
  echo "--features lab/mariadb,scenarios/mariadb,holder/mariadb"
else
  echo "ensure-mariadb: no MariaDB (apt-get install -y mariadb-server): the U-series will be reported as skipped" >&2
fi
