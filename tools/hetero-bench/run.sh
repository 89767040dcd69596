#!/usr/bin/env bash
# The heterogeneous data plane side by side on one GPU host: the pinned
# copy limit (bin/copybw), then each layout with every flagcx build given
# in FLAGCX_BINS ("bin/flagcx" or "label=path:plugindir ..."), in one run.
#   make && tools/hetero-bench/run.sh              # bin/flagcx with build/plugins (make builds bin/copybw)
#   FLAGCX_BINS="new=bin/flagcx:build/plugins old=/tmp/flagcx:/tmp/plugins" tools/hetero-bench/run.sh
# LARGE, LATENCY, ITERS override the sizes and iterations.
set -euo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
bins=${FLAGCX_BINS:-"new=bin/flagcx:build/plugins"}
large=${LARGE:-"-b 64M -e 1G -f 2"}
iters=${ITERS:-10}
latency=${LATENCY:-"-b 700 -e 700"}

echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(nvidia-smi -L 2>/dev/null | wc -l) GPUs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1
echo "== pinned copies through the plugin ABI"
first=${bins%% *}; first=${first#*=}
bin/copybw -plugin-dir "${first#*:}" -size 256M,64M,1G -n 20 -host-workers "8,16,$(nproc)"
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$ngpu" -ge 2 ]; then
  # Layouts whose every device copies at once share the host's memory and
  # root complex: their bound is this table (every GPU's copies started
  # together), not one device's figure above.
  echo "== pinned copies on all $ngpu GPUs at once"
  bin/copybw -plugin-dir "${first#*:}" -devices all -size 256M,1G -n 20
fi
for spec in $bins; do
  label=${spec%%=*}; rest=${spec#*=}; exe=${rest%%:*}; dir=${rest#*:}
  for on in 1 0; do
    echo "== $label: split 1,1 on nvidia:2, FLAGCX_DEVICE_REDUCE=$on (1: the devices fold, ABI v4 reduceLocal)"
    FLAGCX_DEVICE_REDUCE=$on FLAGCX_CLUSTER_SPLIT_LIST=1,1 "$exe" --plugin-dir "$dir" bench allreduce --ranks nvidia:2 $large -w 3 -n "$iters" -c 0
  done
  # bench takes the host ranks' buffers from MemAlloc (registered: the
  # devices read and write them, internal/sched/shm_registered.go);
  # FLAGCX_SHM_REGISTER=0 gives them ordinary memory, which the host ranks
  # fold themselves.
  # Split 1,1,2: two device clusters beside the host ranks (two vendors'
  # shape), each chunk's host-facing cluster in turn.
  for reg in 1 0; do
    for split in "" 1,1,2; do
      echo "== $label: nvidia:2,host:2${split:+, split $split}, FLAGCX_SHM_REGISTER=$reg"
      env ${split:+FLAGCX_CLUSTER_SPLIT_LIST=$split} FLAGCX_SHM_REGISTER=$reg "$exe" --plugin-dir "$dir" bench allreduce --ranks nvidia:2,host:2 $large -w 3 -n "$iters" -c 0
    done
  done
  if [ "$ngpu" -ge 4 ]; then
    for split in 2,2 1,1,1,1; do
      echo "== $label: split $split on nvidia:4"
      FLAGCX_CLUSTER_SPLIT_LIST=$split "$exe" --plugin-dir "$dir" bench allreduce --ranks nvidia:4 $large -w 3 -n "$iters" -c 0
    done
  fi
  echo "== $label: nvidia:2,host:3 latency"
  "$exe" --plugin-dir "$dir" bench allreduce --ranks nvidia:2,host:3 $latency -w 20 -n 200 -c 0
done
# Exactness of the layouts the issue names (every collective, type and op).
first_exe=${first%%:*}
exact() { "$first_exe" --plugin-dir "${first#*:}" bench all "$@" -b 1K -e 4M -f 16 -d all -o all -c 1 -w 1 -n 1 | grep -E "Out of bounds|error" | sort | uniq -c; }
echo "== exact: nvidia:2,host:2"
exact --ranks nvidia:2,host:2
echo "== exact: nvidia:2,host:2, split 1,1,2"
FLAGCX_CLUSTER_SPLIT_LIST=1,1,2 exact --ranks nvidia:2,host:2
if [ "$ngpu" -ge 4 ]; then
  echo "== exact: split 2,2 on nvidia:4"
  FLAGCX_CLUSTER_SPLIT_LIST=2,2 exact --ranks nvidia:4
fi
