#!/usr/bin/env bash
# One-sided Put on 2 host ranks of this machine, side by side in one run:
#   flagcx alloc     bin/flagcx bench put --np 2 --window alloc (windows in
#                    shared memory the peer maps: zero-copy)
#   flagcx register  --window register (the caller's memory: the bytes go
#                    over the ranks' links and the target's progress
#                    goroutine copies them in)
#   openmpi          MPI_Put into MPI_Win_allocate's window, passive target
#                    (tools/bench-compare/mpi_put.c, OSU's put latency and
#                    bandwidth tests' shape)
# Latency: one Put and its completion at the target (flagcx: Put then
# WaitCounter; MPI: MPI_Put then MPI_Win_flush) per iteration. Bandwidth:
# many Puts in flight, then one completion (flagcx: the in-flight half of
# bench's table; MPI: 64 Puts then a flush).
# MIN, MAX, FACTOR, WARMUP, ITERS as in run.sh. Needs mpicc and mpirun
# (apt-get install openmpi-bin libopenmpi-dev, or SKIP_MPI=1).
set -euo pipefail
cd "$(dirname "$0")/../.."
MIN=${MIN:-8} MAX=${MAX:-4194304} FACTOR=${FACTOR:-2} WARMUP=${WARMUP:-20} ITERS=${ITERS:-200}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[ -x bin/flagcx ] || make flagcx
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r); 2 ranks, $WARMUP+$ITERS iterations"
cols=()
for window in alloc register; do
  echo "# flagcx $window ..." >&2
  bin/flagcx bench put --np 2 --window "$window" -b "$MIN" -e "$MAX" -f "$FACTOR" -w "$WARMUP" -n "$ITERS" |
    awk '$1 ~ /^[0-9]+$/ {print $1, $6, $11}' > "$out/flagcx-$window"
  cols+=("flagcx-$window")
done
if [ -z "${SKIP_MPI:-}" ]; then
  echo "# openmpi ..." >&2
  mpicc -O2 -o "$out/mpi_put" tools/bench-compare/mpi_put.c
  mpirun --allow-run-as-root --oversubscribe -np 2 "$out/mpi_put" "$MIN" "$MAX" "$FACTOR" "$WARMUP" "$ITERS" > "$out/openmpi"
  cols+=(openmpi)
fi
{
  printf "| size |"; for c in "${cols[@]}"; do printf " %s latency us |" "$c"; done
  for c in "${cols[@]}"; do printf " %s bandwidth GB/s |" "$c"; done; echo
  printf "|---|"; for _ in "${cols[@]}" "${cols[@]}"; do printf -- "---|"; done; echo
}
awk -v cols="${cols[*]}" -v dir="$out" '
BEGIN {
  n = split(cols, c, " ")
  for (i = 1; i <= n; i++) {
    f = dir "/" c[i]
    while ((getline line < f) > 0) {
      split(line, v, " ")
      if (!(v[1] in seen)) { seen[v[1]] = 1; order[++m] = v[1] }
      lat[c[i], v[1]] = v[2]; bw[c[i], v[1]] = v[3]
    }
  }
  for (k = 1; k <= m; k++) {
    s = order[k]
    row = "| " (s >= 1048576 ? s / 1048576 " MiB" : (s >= 1024 ? s / 1024 " KiB" : s " B")) " |"
    for (i = 1; i <= n; i++) row = row " " (((c[i], s) in lat) ? lat[c[i], s] : "-") " |"
    for (i = 1; i <= n; i++) row = row " " (((c[i], s) in bw) ? bw[c[i], s] : "-") " |"
    print row
  }
}'
