#!/usr/bin/env bash
# mpirun's rsh agent for emulated hosts (tools/hosts/hosts.sh): called as
# "hosts-rsh.sh [ssh options] HOST COMMAND...", it runs COMMAND through a
# shell inside HOST (PREFIX<I>, the prefix in FLAGCX_HOSTS_PREFIX).
set -euo pipefail
while [[ ${1:-} == -* ]]; do shift; done
host=$1
shift
prefix=${FLAGCX_HOSTS_PREFIX:-fxh-}
i=${host#"$prefix"}
[[ $i =~ ^[0-9]+$ ]] || { echo "hosts-rsh.sh: '$host' is not an emulated host $prefix<N>" >&2; exit 255; }
exec "$(dirname "$0")/../hosts/hosts.sh" -p "$prefix" exec "$i" sh -c "$*"
