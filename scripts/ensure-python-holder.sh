#!/usr/bin/env bash
# Makes the example Python holder runnable (examples/holders/python): psycopg 3 for Debian's
# python3 (/usr/bin/python3, the script's shebang: python3-psycopg, installed with apt-get when
# missing and this runs as root) — and for the `python3` on PATH when that is another interpreter
# (pyenv, a venv), so that `--holder-cmd "python3 examples/holders/python/holder.py"` runs too
# (psycopg[binary] from PyPI, with pip). Quiet when present; says what to install otherwise.
set -euo pipefail
has() { "$1" -c 'import psycopg' >/dev/null 2>&1; }
if ! has /usr/bin/python3 && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-python-holder: installing python3-psycopg with apt-get (for the example Python holder)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends python3-psycopg >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends python3-psycopg >/dev/null 2>&1; } \
    || true
fi
has /usr/bin/python3 || { echo "ensure-python-holder: psycopg is missing (apt-get install -y python3-psycopg)" >&2; exit 2; }
# The python3 a command line names, when it is not Debian's.
other=$(command -v python3 || true)
if [ -n "$other" ] && [ "$(readlink -f "$other")" != "$(readlink -f /usr/bin/python3)" ] && ! has "$other"; then
  echo "ensure-python-holder: installing psycopg[binary] with pip for $other (python3 on PATH)" >&2
  "$other" -m pip install --quiet --disable-pip-version-check 'psycopg[binary]' >/dev/null 2>&1 || true
  has "$other" || echo "ensure-python-holder: $other has no psycopg (python3 -m pip install 'psycopg[binary]'); the holder's shebang, /usr/bin/python3, has it" >&2
fi
exit 0
