#!/usr/bin/env bash
# flagcx's nvidia backend beside raw NCCL, in one run on this machine:
# float32 sum allreduce over NGPUS GPUs (default 2), 8 B .. 4 GiB by 4.
# Needs: CUDA + NCCL headers/libraries, bin/flagcx and build/plugins (make,
# carried from a build machine). Prints both tables and a comparison.
set -euo pipefail
cd "$(dirname "$0")/../.."
NGPUS=${NGPUS:-2} MIN=${MIN:-8} MAX=${MAX:-4294967296} FACTOR=${FACTOR:-4} WARMUP=${WARMUP:-5} ITERS=${ITERS:-20}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
out=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$out"

gcc -O2 -I"$CUDA_HOME/include" -o "$out/nccl_allreduce" tools/nccl-baseline/nccl_allreduce.c \
  -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lcudart -lnccl -lpthread

echo "## raw NCCL ($NGPUS GPUs, one process each, CUDA events)"
"$out/nccl_allreduce" "$NGPUS" "$MIN" "$MAX" "$FACTOR" "$WARMUP" "$ITERS" | tee "$out/baseline.txt"
echo
if [ "${THREADS_TOO:-1}" = 1 ]; then
  echo "## raw NCCL ($NGPUS GPUs, one thread each in one process, as nccl-tests -g $NGPUS; for reference)"
  BASELINE_THREADS=1 "$out/nccl_allreduce" "$NGPUS" "$MIN" "$MAX" "$FACTOR" "$WARMUP" "$ITERS"
  echo
fi
echo "## flagcx bench allreduce --ranks nvidia:$NGPUS -b $MIN -e $MAX -f $FACTOR"
bin/flagcx --plugin-dir build/plugins bench allreduce --ranks "nvidia:$NGPUS" -b "$MIN" -e "$MAX" -f "$FACTOR" \
  -w "$WARMUP" -n "$ITERS" --json "$out/flagcx.json" | tee "$out/flagcx.txt"
echo
python3 - "$out/baseline.txt" "$out/flagcx.json" <<'PY'
import json, re, sys
base = {}
for line in open(sys.argv[1]):
    m = re.match(r"Comm size: (\d+) bytes; Elapsed time: ([\d.]+) sec; Algo bandwidth: ([\d.]+) GB/s; Bus bandwidth: ([\d.]+) GB/s", line)
    if m:
        base[int(m[1])] = (float(m[2]) * 1e6, float(m[4]))
print("| size | NCCL (processes) us | flagcx us | flagcx - NCCL us | NCCL busbw GB/s | flagcx busbw GB/s | flagcx/NCCL busbw |")
print("|---|---|---|---|---|---|---|")
for r in json.load(open(sys.argv[2]))["results"]:
    size = r["size"]
    if size not in base:
        continue
    bu, bb = base[size]
    fu, fb = r["out_of_place"]["time_us"], r["out_of_place"]["busbw"]
    ratio = f"{fb / bb:.3f}" if bb > 0 else "-"
    print(f"| {size} | {bu:.2f} | {fu:.2f} | {fu - bu:+.2f} | {bb:.2f} | {fb:.2f} | {ratio} |")
PY
