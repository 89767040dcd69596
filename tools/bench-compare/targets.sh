#!/usr/bin/env bash
# The same-host targets side by side (flagcx, Gloo, OpenMPI in one run each):
#   2 ranks, 1 KiB..4 KiB allreduce latency;
#   4 ranks, 1 KiB and 64 MiB;
#   8 ranks, 1 KiB and 64 MiB (on hosts with 16 cores or more).
# Passes FLAGCX_BINS, SKIP_GLOO, SKIP_MPI, PYTHON, MPI_BIN on to run.sh.
set -euo pipefail
cd "$(dirname "$0")"
ITERS_SMALL=${ITERS_SMALL:-2000} ITERS_LARGE=${ITERS_LARGE:-20}
NP=2 MIN=1024 MAX=4096 FACTOR=4 WARMUP=100 ITERS=$ITERS_SMALL ./run.sh
nps="4"
[ "$(nproc)" -ge 16 ] && nps="4 8"
for np in $nps; do
  NP=$np MIN=1024 MAX=1024 FACTOR=4 WARMUP=100 ITERS=$ITERS_SMALL ./run.sh
  NP=$np MIN=67108864 MAX=67108864 FACTOR=4 WARMUP=3 ITERS=$ITERS_LARGE ./run.sh
done
