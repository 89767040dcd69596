#!/usr/bin/env bash
# Device reductions (ABI v4 reduceLocal) on ONE GPU, for when only a
# one-GPU machine is at hand: two (or three) NVIDIA clusters of one rank
# each share device 0. NCCL refuses two ranks of one communicator on one
# GPU, but a cluster of one rank needs no NCCL communicator, so each rank
# loads the nvidia plugin under its own file name (libflagcx-nvidia.so,
# libflagcx-nvidib.so, ...: a placement names a plugin file, and ranks of
# different placement names count their devices apart) and
# FLAGCX_CLUSTER_SPLIT_LIST makes each one a cluster. Both ranks then share
# one PCIe link, so the copy bound is half of bin/copybw's figure each way
# with both directions at once; every timed row says what share of that
# bound it reached ("of bound").
#
# Two processes on one GPU take turns on it (time slices) unless the
# CUDA MPS daemon lets them share its engines as two GPUs' processes would
# run side by side; so the script runs its own MPS daemon where
# nvidia-cuda-mps-control exists (MPS=0: without it) and stops it on exit.
#   make && tools/hetero-bench/one-gpu.sh   # exactness, then timings side by side (make builds bin/copybw)
# SIZES, ITERS override the timed sizes and iterations.
set -euo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
sizes=${SIZES:-"-b 64M -e 1G -f 2"}
iters=${ITERS:-10}
dir=$(mktemp -d)
mps_quit() { :; }
trap 'mps_quit; rm -rf "$dir"' EXIT
for n in nvidia nvidib nvidic; do cp build/plugins/libflagcx-nvidia.so "$dir/libflagcx-$n.so"; done
# run uses the renamed plugin copies; pdir=DIR run ... another directory.
run() { bin/flagcx --plugin-dir "${pdir:-$dir}" bench allreduce "$@" 2>&1 | grep -v "its table says name"; }
# checked prints a checked run's verdict: its summary and any row with wrong elements.
checked() { run "$@" | awk '/Out of bounds|error/ {print; next} /^ +[0-9]/ && ($9 != 0 || $13 != 0) {print "WRONG:", $0} /^ +[0-9]/ {n++} END {print "# rows checked:", n}'; }
# timed prints a timed run's rows, each with its busbw over the bound.
timed() { run "$@" | awk -v b="$bound" '/^ +[0-9]/ {printf "%s   of bound %.0f%% / %.0f%%\n", $0, 100*$8/b, 100*$12/b; next} /error/'; }

echo "== $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
if [ "${MPS:-1}" = 1 ] && command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=$dir/mps-pipe CUDA_MPS_LOG_DIRECTORY=$dir/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
  mps_quit() { echo quit | nvidia-cuda-mps-control >/dev/null 2>&1 || true; }
  echo "== MPS on (this script's daemon): the ranks' processes share the GPU's engines"
else
  echo "== MPS off: the ranks' processes take turns on the GPU"
fi
echo "== exactness: every type and op, 1 MiB chunks, device reductions on"
FLAGCX_CLUSTER_SPLIT_LIST=1,1 FLAGCX_NET_CHUNK_SIZE=1M checked --ranks nvidia:1,nvidib:1 -b 300K -e 20M -f 4 -c 1 -d all -o all -w 1 -n 1
FLAGCX_CLUSTER_SPLIT_LIST=1,1,1 FLAGCX_NET_CHUNK_SIZE=1M checked --ranks nvidia:1,nvidib:1,nvidic:1 -b 1M -e 20M -f 4 -c 1 -d all -o all -w 1 -n 1
echo "== pinned copies through the plugin ABI (one process; two ranks share this link)"
bin/copybw -plugin-dir build/plugins -size 64M,256M,1G -n 20 | tee "$dir/copybw"
# The bound: half the smallest "both at once, each way" rate of pinned memory.
bound=$(awk -F'|' '$3 ~ /pinned/ {v = $6 + 0; if (m == 0 || v < m) m = v} END {printf "%.2f", m / 2}' "$dir/copybw")
echo "== bound for two ranks on this link: $bound GB/s busbw"
for on in 1 0; do
  echo "== split 1,1 on one GPU, FLAGCX_DEVICE_REDUCE=$on"
  FLAGCX_DEVICE_REDUCE=$on FLAGCX_CLUSTER_SPLIT_LIST=1,1 timed --ranks nvidia:1,nvidib:1 $sizes -w 3 -n "$iters" -c 0
done
# nvidia:1,host:2 and nvidia:1,host:1: bench takes the host ranks' buffers
# from MemAlloc, so the device reads their inputs and writes their results
# itself (internal/sched/shm_registered.go): per byte of the message the
# link carries one byte each way per host rank, so busbw (2(n-1)/n algbw)
# is bound by the "both at once" rate times 2/3 beside two host ranks and
# times 1 beside one. FLAGCX_SHM_REGISTER=0 gives the host ranks ordinary
# memory: they fold in host memory, the path before registration.
both=$(awk "BEGIN {printf \"%.2f\", 2 * $bound}")
for hosts in 2 1; do
  for reg in 1 0; do
    echo "== nvidia:1,host:$hosts, FLAGCX_SHM_REGISTER=$reg ($([ $reg = 1 ] && echo "registered: the device reads and writes the host ranks' buffers" || echo "ordinary memory: the host ranks fold"))"
    bound=$(awk "BEGIN {printf \"%.2f\", $both * ($hosts == 2 ? 2 / 3 : 1)}") FLAGCX_SHM_REGISTER=$reg pdir=build/plugins timed --ranks nvidia:1,host:$hosts $sizes -w 3 -n "$iters" -c 0
  done
done
echo "== nvidia:1,host:2, registered, checked: every type and op"
pdir=build/plugins checked --ranks nvidia:1,host:2 -b 300K -e 20M -f 4 -c 1 -d all -o all -w 1 -n 1
# 700 B (the issue's latency target, 15 us): a device rank beside host
# ranks relays (plugin ABI v5, one launch); FLAGCX_DEVICE_REDUCE=0 is the
# path before it (two device copies the host waits for).
for layout in nvidia:1,host:3 nvidia:1,host:2; do
  for on in 1 0; do
    echo "== $layout, 700 B, FLAGCX_DEVICE_REDUCE=$on ($([ $on = 1 ] && echo "relayReduce" || echo "host-waited copies")), us out of place / in place"
    FLAGCX_DEVICE_REDUCE=$on pdir=build/plugins run --ranks $layout -b 700 -e 700 -w 100 -n 2000 -c 1 | awk '/^ +[0-9]/ {print $6, "/", $10, "us, wrong:", $9, $13} /error/'
  done
done
echo "== split 1,1 on one GPU, device reductions, checked"
FLAGCX_CLUSTER_SPLIT_LIST=1,1 checked --ranks nvidia:1,nvidib:1 -b 256M -e 256M -w 1 -n 2 -c 1
