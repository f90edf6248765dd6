#!/usr/bin/env bash
# Makes sure this machine can run the lab's embedded PostgreSQL:
#   - server binaries (initdb and postgres, version 15 or newer): on PATH, via pg_config, or
#     under /usr/lib/postgresql/*/bin. When missing and running as root with apt-get, installs
#     the Debian package; otherwise prints how to install them and exits 2.
#   - when running as root: the unprivileged user `postgres` the server runs as (initdb and the
#     server refuse root). Created with useradd when missing.
# Quiet when everything is already there.
set -euo pipefail

has_server() {
  local dirs=()
  if command -v initdb >/dev/null 2>&1; then dirs+=("$(dirname "$(readlink -f "$(command -v initdb)")")"); fi
  if command -v pg_config >/dev/null 2>&1; then dirs+=("$(pg_config --bindir 2>/dev/null || true)"); fi
  dirs+=(/usr/lib/postgresql/*/bin)
  local d v
  for d in "${dirs[@]}"; do
    [ -x "$d/initdb" ] && [ -x "$d/postgres" ] || continue
    v=$("$d/postgres" --version 2>/dev/null | awk '{print $3}' | cut -d. -f1)
    [ -n "$v" ] && [ "$v" -ge 15 ] && return 0
  done
  return 1
}

if ! has_server; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-postgres: no PostgreSQL server binaries >= 15 found; installing them with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends postgresql-15 >&2 \
      || apt-get install -y -qq --no-install-recommends postgresql >&2
    has_server || { echo "ensure-postgres: installed, but still no server binaries >= 15 found" >&2; exit 2; }
  else
    echo "ensure-postgres: no PostgreSQL server binaries >= 15 found: install them" \
         "(Debian: sudo apt-get install -y postgresql-15) or pass --pg-bindir DIR to the lab" >&2
    exit 2
  fi
fi

if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
  echo "ensure-postgres: creating the unprivileged user 'postgres' for the server (initdb refuses root)" >&2
  useradd --system --no-create-home --shell /usr/sbin/nologin postgres
fi
