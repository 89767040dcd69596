#!/usr/bin/env bash
# Side-by-side allreduce comparison on this machine, in one run:
# flagcx (host backend), torch.distributed Gloo, OpenMPI's MPI_Allreduce.
# float32 sum, NP ranks (default 4), 1 KiB .. 256 MiB by 4.
# Needs: bin/flagcx (make), mpicc + mpirun (openmpi-bin, libopenmpi-dev),
# python3 with torch (python3-torch). PYTHON picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/../.."
NP=${NP:-4} MIN=${MIN:-1024} MAX=${MAX:-268435456} FACTOR=${FACTOR:-4} WARMUP=${WARMUP:-5} ITERS=${ITERS:-20}
PYTHON=${PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

[ -x bin/flagcx ] || make flagcx
MPI_BIN=${MPI_BIN:-}
if [ -z "$MPI_BIN" ]; then
  MPI_BIN="$out/mpi_allreduce"
  mpicc -O2 -o "$MPI_BIN" tools/bench-compare/mpi_allreduce.c
fi

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r)"
echo "# flagcx ..." >&2
bin/flagcx bench allreduce --np "$NP" -b "$MIN" -e "$MAX" -f "$FACTOR" -w "$WARMUP" -n "$ITERS" -c 0 -d float32 -o sum --format flagcx |
  awk '/^Comm size:/ {gsub(";",""); printf "%s %.2f %s\n", $3, $7*1e6, $15}' > "$out/flagcx"
echo "# gloo ..." >&2
"$PYTHON" tools/bench-compare/gloo_allreduce.py "$NP" "$MIN" "$MAX" "$FACTOR" "$WARMUP" "$ITERS" > "$out/gloo"
echo "# openmpi ..." >&2
mpirun --allow-run-as-root --oversubscribe -np "$NP" "$MPI_BIN" "$MIN" "$MAX" "$FACTOR" "$WARMUP" "$ITERS" > "$out/mpi"

echo "| size | flagcx us | gloo us | openmpi us | flagcx busbw GB/s | gloo busbw | openmpi busbw | flagcx/gloo busbw | flagcx/openmpi busbw | gloo/flagcx latency |"
echo "|---|---|---|---|---|---|---|---|---|---|"
join "$out/flagcx" "$out/gloo" | join - "$out/mpi" | awk '{
  size=$1; fu=$2; fb=$3; gu=$4; gb=$5; mu=$6; mb=$7
  h = size>=1048576 ? sprintf("%d MiB", size/1048576) : sprintf("%d KiB", size/1024)
  printf "| %s | %s | %s | %s | %s | %s | %s | %.2f | %.2f | %.1f |\n", h, fu, gu, mu, fb, gb, mb, (gb>0?fb/gb:0), (mb>0?fb/mb:0), (fu>0?gu/fu:0)
}'
