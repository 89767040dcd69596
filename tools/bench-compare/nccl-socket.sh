#!/usr/bin/env bash
# The TCP path beside NCCL's socket transport, in one run on a GPU machine
# with 2 GPUs: allreduce float32 sum, 2 ranks over loopback, MIN..MAX bytes
# by FACTOR, busbw GB/s:
#   nccl-socket  torch.distributed NCCL on cuda:0/cuda:1 with NCCL_P2P_DISABLE=1
#                NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo (its socket transport)
#   flagcx-host  bin/flagcx bench --np 2 (host ranks), FLAGCX_SHM_DISABLE=1
#   flagcx-1,1   FLAGCX_CLUSTER_SPLIT_LIST=1,1 --ranks nvidia:2 (two clusters on
#                GPUs 0 and 1, data over TCP between them), FLAGCX_SHM_DISABLE=1
#   gloo         torch.distributed Gloo on CPU tensors
# Needs bin/flagcx and build/plugins (make, carried from a build machine),
# python3 with torch (PYTHON, default /opt/torch/.venv/bin/python3).
# FLAGCX_BINS="bin/flagcx old=/path/flagcx" compares builds (label=path).
set -euo pipefail
cd "$(dirname "$0")/../.."
MIN=${MIN:-65536} MAX=${MAX:-268435456} FACTOR=${FACTOR:-4} WARMUP=${WARMUP:-5} ITERS=${ITERS:-20}
PYTHON=${PYTHON:-/opt/torch/.venv/bin/python3}
[ -x "$PYTHON" ] || PYTHON=python3
FLAGCX_BINS=${FLAGCX_BINS:-bin/flagcx}
export NCCL_NVLS_ENABLE=0 FLAGCX_SOCKET_IFNAME=${FLAGCX_SOCKET_IFNAME:-=lo}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(nvidia-smi -L 2>/dev/null | head -2 | tr '\n' ' ')"
echo "# 2 ranks over loopback, float32 sum, $WARMUP+$ITERS iterations; busbw GB/s (time us)"
cols=()
flagcx_table() { awk '$1 ~ /^[0-9]+$/ && $3 == "float32" {print $1, $6, $8}'; }
echo "# nccl-socket ..." >&2
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo NCCL_NET=Socket \
  "$PYTHON" tools/bench-compare/torch_allreduce.py 2 "$MIN" "$MAX" "$FACTOR" "$WARMUP" "$ITERS" cuda nccl > "$out/nccl-socket"
cols+=(nccl-socket)
for spec in $FLAGCX_BINS; do
  label=${spec%%=*} bin=${spec#*=}
  [ "$label" = "$spec" ] && label=flagcx
  echo "# $label host ranks ..." >&2
  FLAGCX_SHM_DISABLE=1 "$bin" bench allreduce --np 2 -b "$MIN" -e "$MAX" -f "$FACTOR" -w "$WARMUP" -n "$ITERS" -c 0 -d float32 -o sum |
    flagcx_table > "$out/$label-host"
  echo "# $label split 1,1 ..." >&2
  FLAGCX_SHM_DISABLE=1 FLAGCX_CLUSTER_SPLIT_LIST=1,1 "$bin" --plugin-dir build/plugins bench allreduce --ranks nvidia:2 \
    -b "$MIN" -e "$MAX" -f "$FACTOR" -w "$WARMUP" -n "$ITERS" -c 0 -d float32 -o sum | flagcx_table > "$out/$label-1,1"
  cols+=("$label-host" "$label-1,1")
done
echo "# gloo ..." >&2
"$PYTHON" tools/bench-compare/torch_allreduce.py 2 "$MIN" "$MAX" "$FACTOR" "$WARMUP" "$ITERS" > "$out/gloo"
cols+=(gloo)
{
  printf "| size |"; for c in "${cols[@]}"; do printf " %s |" "$c"; done
  for c in "${cols[@]}"; do case $c in nccl-socket|gloo) ;; *) printf " %s / nccl-socket |" "$c" ;; esac; done; echo
  printf "|---|"; for c in "${cols[@]}"; do printf -- "---|"; case $c in nccl-socket|gloo) ;; *) printf -- "---|" ;; esac; done; echo
}
awk -v cols="${cols[*]}" -v dir="$out" "$(cat tools/bench-compare/results.awk)"'
BEGIN {
  load(cols, dir)
  for (k = 1; k <= m; k++) {
    s = order[k]; h = label(s)
    row = "| " h " |"
    for (i = 1; i <= n; i++) row = row " " (((c[i], s) in bw) ? sprintf("%s (%s us)", bw[c[i], s], us[c[i], s]) : "-") " |"
    ref = bw["nccl-socket", s] + 0
    for (i = 1; i <= n; i++) {
      if (c[i] == "nccl-socket" || c[i] == "gloo") continue
      row = row " " ((ref > 0 && ((c[i], s) in bw)) ? sprintf("%.2f", bw[c[i], s] / ref) : "-") " |"
    }
    print row
  }
}'
