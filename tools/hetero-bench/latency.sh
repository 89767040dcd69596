#!/usr/bin/env bash
# Small heterogeneous AllReduces side by side: every flagcx build in
# FLAGCX_BINS ("label=path:plugindir ..."), alternated ROUNDS times after
# one warm-up, on each layout of LAYOUTS; then each build with -z 1 (every
# call waited for: its whole latency); then the first build's exactness on
# the first layout at the sizes relays take (up to 16 KiB) and around them.
#   FLAGCX_BINS="new=bin/flagcx:build/plugins old=/tmp/flagcx:/tmp/plugins" tools/hetero-bench/latency.sh
# SIZE, ITERS (-w and -n), ROUNDS and LAYOUTS override the defaults; COLL
# (allreduce) and ARGS (e.g. "-r 2") time another collective; EXACT=0
# skips the exactness runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
bins=${FLAGCX_BINS:-"new=bin/flagcx:build/plugins"}
size=${SIZE:-700}
iters=${ITERS:-"-w 200 -n 2000"}
rounds=${ROUNDS:-3}
ngpu=$( (nvidia-smi -L 2>/dev/null || true) | wc -l)
coll=${COLL:-allreduce}
args=${ARGS:-}
layouts=${LAYOUTS:-"nvidia:$((ngpu >= 2 ? 2 : 1)),host:3 nvidia:1,host:3"}

echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $ngpu GPUs"
# row LABEL LAYOUT FLAGS...: one bench, its row as "time out of place / in place us".
row() {
  local label=$1 layout=$2 spec exe dir; shift 2
  for spec in $bins; do
    [ "${spec%%=*}" = "$label" ] || continue
    exe=${spec#*=}; dir=${exe#*:}; exe=${exe%%:*}
    printf '%-8s %-18s %-6s ' "$label" "$layout" "$*"
    "$exe" --plugin-dir "$dir" bench "$coll" --ranks "$layout" -b "$size" -e "$size" $iters $args -c 0 "$@" 2>&1 |
      awk '/^ +[0-9]/ {printf "%s / %s us\n", $6, $10; ok=1} /rror/ {print; ok=1} END {if (!ok) print "no result"}' || true
  done
}
labels=$(for spec in $bins; do echo "${spec%%=*}"; done)
for layout in $layouts; do
  echo "== $coll $args, $size B on $layout (warm-up, then $rounds rounds)"
  row "$(echo "$labels" | head -1)" "$layout" >/dev/null
  for r in $(seq "$rounds"); do
    for label in $labels; do row "$label" "$layout"; done
  done
done
first=$(echo "$layouts" | cut -d' ' -f1)
echo "== $coll $args, $size B on $first, -z 1 (each call's stream synchronized before the next)"
for label in $labels; do row "$label" "$first" -z 1; done
[ "${EXACT:-1}" = 1 ] || exit 0
first_spec=${bins%% *}; exe=${first_spec#*=}; dir=${exe#*:}; exe=${exe%%:*}
echo "== exact on $first ($(echo "$labels" | head -1))"
for args in "all -b 8 -e 16K -f 4" "allreduce -b 4 -e 64K -f 2" "reduce -b 4 -e 32K -f 4 -r 1"; do
  printf '%-32s ' "$args"
  "$exe" --plugin-dir "$dir" bench $args --ranks "$first" -d all -o all -c 1 -w 2 -n 5 2>&1 |
    { grep -E "Out of bounds|rror" || true; } | sort | uniq -c | tr -s ' ' | tr '\n' ' '
  echo
done
