#!/usr/bin/env bash
# Side-by-side allreduce comparison on this machine, in one run:
# flagcx (host backend; several builds if FLAGCX_BINS names them),
# torch.distributed Gloo and OpenMPI's MPI_Allreduce.
# float32 sum, NP ranks (default 4), MIN..MAX bytes by FACTOR.
#
#   FLAGCX_BINS="bin/flagcx old=/tmp/flagcx-main"   builds to compare (label=path)
#   SKIP_GLOO=1 / SKIP_MPI=1                         leave a library out ("-")
#   PYTHON (python3 with torch), MPI_BIN (a built mpi_allreduce)
#
# Needs: bin/flagcx (make), mpicc + mpirun (openmpi-bin, libopenmpi-dev),
# python3 with torch (python3-torch). Every library's time is the slowest
# rank's average per iteration; busbw = algbw x 2(n-1)/n.
set -euo pipefail
cd "$(dirname "$0")/../.."
NP=${NP:-4} MIN=${MIN:-1024} MAX=${MAX:-268435456} FACTOR=${FACTOR:-4} WARMUP=${WARMUP:-5} ITERS=${ITERS:-20}
PYTHON=${PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}
FLAGCX_BINS=${FLAGCX_BINS:-bin/flagcx}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

[ -x bin/flagcx ] || make flagcx
if [ -z "${SKIP_MPI:-}" ] && ! command -v mpirun >/dev/null; then
  echo "# no mpirun: apt-get install openmpi-bin libopenmpi-dev (or SKIP_MPI=1)" >&2; exit 1
fi
if [ -z "${SKIP_GLOO:-}" ] && ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  echo "# no torch for $PYTHON: apt-get install python3-torch, or PYTHON=... (or SKIP_GLOO=1)" >&2; exit 1
fi

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r); $NP ranks, float32 sum, $WARMUP+$ITERS iterations"
cols=()
for spec in $FLAGCX_BINS; do
  label=${spec%%=*} bin=${spec#*=}
  [ "$label" = "$spec" ] && label=flagcx
  echo "# $label ($bin) ..." >&2
  # The nccl-tests table: size count type redop root time(us) algbw busbw ...
  # (out-of-place columns), with 0.01 us resolution.
  "$bin" bench allreduce --np "$NP" -b "$MIN" -e "$MAX" -f "$FACTOR" -w "$WARMUP" -n "$ITERS" -c 0 -d float32 -o sum |
    awk '$1 ~ /^[0-9]+$/ && $3 == "float32" {print $1, $6, $8}' > "$out/$label"
  cols+=("$label")
done
if [ -z "${SKIP_GLOO:-}" ]; then
  echo "# gloo ..." >&2
  "$PYTHON" tools/bench-compare/torch_allreduce.py "$NP" "$MIN" "$MAX" "$FACTOR" "$WARMUP" "$ITERS" > "$out/gloo"
  cols+=(gloo)
fi
if [ -z "${SKIP_MPI:-}" ]; then
  MPI_BIN=${MPI_BIN:-}
  if [ -z "$MPI_BIN" ]; then
    MPI_BIN="$out/mpi_allreduce"
    mpicc -O2 -o "$MPI_BIN" tools/bench-compare/mpi_allreduce.c
  fi
  echo "# openmpi ..." >&2
  mpirun --allow-run-as-root --oversubscribe -np "$NP" "$MPI_BIN" "$MIN" "$MAX" "$FACTOR" "$WARMUP" "$ITERS" > "$out/openmpi"
  cols+=(openmpi)
fi

# One row per size: every library's time and busbw, then the first
# flagcx build's ratios to Gloo and OpenMPI (busbw, and latency).
first=${cols[0]}
{
  printf "| size |"; for c in "${cols[@]}"; do printf " %s us |" "$c"; done
  for c in "${cols[@]}"; do printf " %s busbw GB/s |" "$c"; done
  printf " %s/gloo busbw | %s/openmpi busbw | %s/openmpi latency |\n" "$first" "$first" "$first"
  printf "|---|"; for _ in "${cols[@]}" "${cols[@]}"; do printf -- "---|"; done; printf -- "---|---|---|\n"
}
awk -v cols="${cols[*]}" -v dir="$out" -v first="$first" "$(cat tools/bench-compare/results.awk)"'
BEGIN {
  load(cols, dir)
  for (k = 1; k <= m; k++) {
    s = order[k]
    h = label(s)
    row = "| " h " |"
    for (i = 1; i <= n; i++) row = row " " (((c[i], s) in us) ? us[c[i], s] : "-") " |"
    for (i = 1; i <= n; i++) row = row " " (((c[i], s) in bw) ? bw[c[i], s] : "-") " |"
    fb = bw[first, s]; fu = us[first, s]
    row = row " " (((("gloo", s) in bw) && bw["gloo", s] > 0) ? sprintf("%.2f", fb / bw["gloo", s]) : "-") " |"
    row = row " " (((("openmpi", s) in bw) && bw["openmpi", s] > 0) ? sprintf("%.2f", fb / bw["openmpi", s]) : "-") " |"
    row = row " " (((("openmpi", s) in us) && us["openmpi", s] > 0) ? sprintf("%.2f", fu / us["openmpi", s]) : "-") " |"
    print row
  }
}'
