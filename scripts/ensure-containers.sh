#!/usr/bin/env bash
# Makes the container experiments (F15, F16) possible when a Docker engine answers: as root with
# apt-get, installs what building the lab's images and holding a request need (debootstrap,
# iptables) if missing. Prints the cargo feature flag to build with on stdout:
# "--features lab/containers" when an engine answers, nothing when none does (F15 and F16 are then
# reported as skipped, with the reason). The images themselves are built by the lab on first use
# (about a minute) and reused; `./run.sh clean --images` removes them.
set -euo pipefail

if ! docker info >/dev/null 2>&1; then
  echo "ensure-containers: no Docker engine answers (docker info): F15 and F16 will be reported as skipped" >&2
  exit 0
fi
missing=()
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || missing+=(iptables)
if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-containers: installing ${missing[*]} with apt-get (for F15/F16's image and network holds)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; } \
    || echo "ensure-containers: could not install ${missing[*]}; F15 will say why it skips" >&2
fi
echo "--features lab/containers"
