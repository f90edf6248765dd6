#!/usr/bin/env bash
# Makes libfaketime available for the experiments that fake one process's clock (U3; F13 next):
# if it is missing and this runs as root with apt-get, installs the Debian package faketime.
# Without it those experiments say `skip` with the install hint — never pass. Quiet when present.
set -euo pipefail

has_faketime() { compgen -G "/usr/lib/*/faketime/libfaketime.so.1" >/dev/null || [ -f /usr/local/lib/faketime/libfaketime.so.1 ]; }

if ! has_faketime && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-faketime: libfaketime not found; installing faketime with apt-get (for U3)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends faketime >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends faketime >/dev/null 2>&1; } \
    || echo "ensure-faketime: could not install faketime; U3 will be skipped" >&2
fi
has_faketime || echo "ensure-faketime: no libfaketime (apt-get install -y faketime): U3 will be reported as skipped" >&2
