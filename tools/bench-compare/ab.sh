#!/usr/bin/env bash
# Two (or more) flagcx builds side by side, alternated ROUNDS times, on the
# rows a refactor must leave unchanged (issue 41): the host placement's
# small calls (AllReduce and Send/Recv of 1 KiB between 2 ranks, mean us
# per call) and the emulated heterogeneous calls of 700 B on
# nvidia:2,host:3 (out of place / in place us). CPUs only; every row of
# the second kind is the emulated runtime (conformance/vendorsim).
#   FLAGCX_BINS="before=/tmp/flagcx:/tmp/plugins after=bin/flagcx:build/plugins" tools/bench-compare/ab.sh
# ROUNDS (3), HOST_ITERS ("-w 200 -n 3000"), EMU_ITERS ("-w 50 -n 500")
# and COLLS override the defaults.
set -euo pipefail
cd "$(dirname "$0")/../.."
bins=${FLAGCX_BINS:-"after=bin/flagcx:build/plugins"}
rounds=${ROUNDS:-3}
host_iters=${HOST_ITERS:-"-w 200 -n 3000"}
emu_iters=${EMU_ITERS:-"-w 50 -n 500"}
colls=${COLLS:-"allreduce reduce reducescatter allgather broadcast"}

# row LABEL EXE DIR ARGS...: one bench's time, out of place / in place.
row() {
  local label=$1 exe=$2 dir=$3; shift 3
  printf '%-8s %-44s ' "$label" "$*"
  "$exe" --plugin-dir "$dir" bench "$@" -c 0 2>&1 |
    awk '/^ +[0-9]/ {printf "%s / %s us\n", $6, $10; ok=1} /rror/ {print; ok=1} END {if (!ok) print "no result"}' || true
}
each() {
  local spec exe dir
  for spec in $bins; do
    exe=${spec#*=}; dir=${exe#*:}; exe=${exe%%:*}
    row "${spec%%=*}" "$exe" "$dir" "$@"
  done
}
echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  echo "== round $r"
  each allreduce --np 2 -b 1K -e 1K $host_iters
  each sendrecv --np 2 -b 1K -e 1K $host_iters
  for coll in $colls; do
    each "$coll" --emulated --ranks nvidia:2,host:3 -b 700 -e 700 $emu_iters
  done
done
