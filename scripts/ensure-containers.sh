#!/usr/bin/env bash
# Makes the container experiments (F15–F17, and the lock services as lease stores: Redis, etcd,
# ZooKeeper) possible when a Docker engine answers: as root with apt-get, installs what building
# the lab's images and holding a request need (debootstrap, iptables), and protoc (Debian's
# protobuf-compiler: the etcd client's build compiles etcd's .proto files), if missing. Prints the
# cargo feature flags to build with on stdout: "--features lab/containers,lab/lock-services,
# holder/lock-services" when an engine answers (without protoc, the lock services are left out and
# it says so), nothing when none does (those experiments are then reported as skipped, with the
# reason). The images themselves are built by the lab on first use (about a minute each) and
# reused; `./run.sh clean --images` removes them.
set -euo pipefail

if ! docker info >/dev/null 2>&1; then
  echo "ensure-containers: no Docker engine answers (docker info): F15 and F16 will be reported as skipped" >&2
  exit 0
fi
missing=()
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || missing+=(iptables)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-containers: installing ${missing[*]} with apt-get (for F15/F16's image and network holds)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; } \
    || echo "ensure-containers: could not install ${missing[*]}; F15 will say why it skips" >&2
fi
if command -v protoc >/dev/null 2>&1; then
  echo "--features lab/containers,lab/lock-services,holder/lock-services"
else
  echo "ensure-containers: no protoc (protobuf-compiler): the lock services are left out of this build" >&2
  echo "--features lab/containers"
fi
