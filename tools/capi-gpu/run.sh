#!/usr/bin/env bash
# FlagCX's own users on flagcx-go's libflagcx.so, on a machine with two or
# more NVIDIA GPUs and no internet (docs/c-api.md, "On GPUs"):
#
#  1. capi/test/collectives.c on the real nvidia backend, 2 ranks: every
#     collective exact through the C API (homogeneous, then split 1,1);
#  2. FlagCX's torch plugin, its sources unchanged, built against
#     build/include/flagcx.h and build/lib/libflagcx.so: torch.distributed
#     all_reduce, all_gather, reduce_scatter, broadcast, all_to_all and
#     send/recv on 2 GPUs exact, and all_reduce timed against torch's NCCL
#     backend in the same processes (tools/capi-gpu/torch_check.py); then
#     exactness again with FLAGCX_CLUSTER_SPLIT_LIST=1,1;
#  3. FlagCX's test/perf/host_api perf_allreduce, perf_allgather and
#     perf_alltoall built against the same two files, run under mpirun.
#
#   tools/capi-gpu/run.sh [FlagCX source dir]      (default build/flagcx-src)
#
# Needs: make's build/lib, build/include and build/plugins (built where Go
# is, carried along), the FlagCX sources from tools/capi-gpu/prepare.sh,
# python3 with torch ($PY, default /opt/torch/.venv/bin/python3), CUDA
# under /usr/local/cuda, mpicxx and mpirun. Logs go to $OUT (the device
# machine's output folder) or build/capi-gpu. Exit status 0 when every
# step passed and all_reduce at >= 64 MiB is within 3% of NCCL's.
#
# STEPS="1 3" runs some of the steps. EMULATED=1 runs step 1 on the
# emulated CUDA/NCCL of build/vendorsim instead (a rehearsal of the script
# on a machine without GPUs; it says EMULATED).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
SRC=$(realpath "${1:-build/flagcx-src}")
PY=${PY:-/opt/torch/.venv/bin/python3}
LOGS=${OUT:-$REPO/build/capi-gpu}
NGPU=${NGPU:-2}
MIN_RATIO=${MIN_RATIO:-0.97}
mkdir -p "$LOGS"
export NCCL_NVLS_ENABLE=0 # NVLink SHARP needs multicast, which these machines leave off
export FLAGCX_BACKEND=nvidia FLAGCX_PLUGIN_DIR=$REPO/build/plugins
STEPS=${STEPS:-1 2 3}
unset FLAGCX_EMULATED
if [ "${EMULATED:-0}" = 1 ]; then
    echo "EMULATED: the nvidia plugin on build/vendorsim's emulated CUDA and NCCL, not on GPUs"
    export FLAGCX_EMULATED=1
fi

FAILURES=()
step() { echo; echo "=== $*"; }
failed() { echo "FAILED: $*"; FAILURES+=("$*"); }

for f in build/lib/libflagcx.so build/include/flagcx.h build/plugins/libflagcx-nvidia.so; do
    [ -f "$f" ] || { echo "missing $f: run make where Go is and carry build/lib, build/include and build/plugins" >&2; exit 2; }
done
[ "$STEPS" = 1 ] || [ -f "$SRC/plugin/torch/setup.py" ] || { echo "no FlagCX sources in $SRC: run tools/capi-gpu/prepare.sh where FlagCX can be fetched, and carry build/flagcx-src" >&2; exit 2; }
[ "$STEPS" = 1 ] || [ -x "$PY" ] || { echo "no python at $PY: set PY" >&2; exit 2; }
[ "${EMULATED:-0}" = 1 ] || nvidia-smi -L || { echo "no NVIDIA GPUs here" >&2; exit 2; }

# A FlagCX tree whose header and library are flagcx-go's: FlagCX's build
# files look for flagcx/include and build/lib under the repository root.
WORK=$(mktemp -d /tmp/capi-gpu.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FLAGCX=$WORK/FlagCX
mkdir -p "$FLAGCX/flagcx/include" "$FLAGCX/build/lib"
[ ! -d "$SRC" ] || cp -r "$SRC/plugin" "$SRC/test" "$SRC/third-party" "$FLAGCX/"
cp build/include/flagcx.h "$FLAGCX/flagcx/include/"
cp build/lib/libflagcx.so "$FLAGCX/build/lib/"
echo "FlagCX sources: $SRC ($(cat "$SRC/FLAGCX_COMMIT" 2>/dev/null || echo "commit unknown")); flagcx-go: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }

if has 1; then
step "1. the C API test on the nvidia backend ($NGPU ranks)"
cc -O1 -Wall -Werror -std=gnu11 -I"$FLAGCX/flagcx/include" -o "$WORK/collectives" capi/test/collectives.c \
    -L"$FLAGCX/build/lib" -lflagcx -Wl,-rpath,"$FLAGCX/build/lib" || failed "building capi/test/collectives.c"
# cranks LOG [VAR=value...]: ranks of collectives.c, rank 0 first (it prints the id).
cranks() {
    local log=$1; shift
    env "$@" CAPI_TEST_VENDOR=NVIDIA timeout 300 "$WORK/collectives" 0 "$NGPU" >"$log.0" 2>&1 &
    local pid0=$! id="" i
    for _ in $(seq 100); do id=$(head -1 "$log.0" | sed -n 's/^ID //p'); [ -n "$id" ] && break; sleep 0.1; done
    local pids=()
    for i in $(seq 1 $((NGPU - 1))); do
        env "$@" CAPI_TEST_VENDOR=NVIDIA timeout 300 "$WORK/collectives" "$i" "$NGPU" "$id" >"$log.$i" 2>&1 &
        pids+=($!)
    done
    local rc=0
    wait "$pid0" || rc=1
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    grep -hv '^ID ' "$log".*
    return $rc
}
cranks "$LOGS/collectives-homo" CAPI_TEST_HOMO=1 || failed "collectives.c on nvidia"
if [ "$NGPU" -ge 2 ]; then
    cranks "$LOGS/collectives-split" CAPI_TEST_HOMO=0 FLAGCX_CLUSTER_SPLIT_LIST=$(printf '1,%.0s' $(seq "$NGPU") | sed 's/,$//') ||
        failed "collectives.c on nvidia split into clusters of 1"
else
    echo "split into clusters of 1: skipped, one GPU makes one cluster (NGPU=$NGPU)"
fi
fi

if has 2; then
step "2. FlagCX's torch plugin against build/include and build/lib"
# -lcuda links against the driver's stub where the driver has no libcuda.so.
(cd "$FLAGCX/plugin/torch" && LIBRARY_PATH=/usr/local/cuda/lib64/stubs${LIBRARY_PATH:+:$LIBRARY_PATH} \
    FLAGCX_ADAPTOR=nvidia "$PY" setup.py build_ext --inplace) >"$LOGS/torch-plugin-build.log" 2>&1 ||
    { tail -40 "$LOGS/torch-plugin-build.log"; failed "building FlagCX's torch plugin"; }
TORCHRUN=("$PY" -m torch.distributed.run --standalone --nproc_per_node "$NGPU")
export PYTHONPATH=$FLAGCX/plugin/torch${PYTHONPATH:+:$PYTHONPATH}
"${TORCHRUN[@]}" tools/capi-gpu/torch_check.py 2>&1 | tee "$LOGS/torch-check.log"
[ "${PIPESTATUS[0]}" = 0 ] || failed "torch.distributed on flagcx"
if [ "$NGPU" -ge 2 ]; then
    awk -v min="$MIN_RATIO" '$1 == "allreduce" && $2 >= 67108864 && $8 < min { bad = 1 } END { exit bad }' "$LOGS/torch-check.log" ||
        failed "all_reduce >= 64 MiB slower than NCCL by more than $(awk -v m="$MIN_RATIO" 'BEGIN { print (1 - m) * 100 }')%"
    grep -q '^allreduce ' "$LOGS/torch-check.log" || failed "no all_reduce timings"
fi
FLAGCX_CLUSTER_SPLIT_LIST=$(printf '1,%.0s' $(seq "$NGPU") | sed 's/,$//') "${TORCHRUN[@]}" tools/capi-gpu/torch_check.py --no-timing 2>&1 |
    tee "$LOGS/torch-check-split.log"
[ "${PIPESTATUS[0]}" = 0 ] || failed "torch.distributed on flagcx with FLAGCX_CLUSTER_SPLIT_LIST"
fi

if has 3; then
step "3. FlagCX's perf tests (test/perf/host_api) under mpirun"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np "$NGPU" -x NCCL_NVLS_ENABLE -x FLAGCX_BACKEND -x FLAGCX_PLUGIN_DIR -x PATH)
[ -z "${LD_LIBRARY_PATH:-}" ] || MPIRUN+=(-x LD_LIBRARY_PATH)
[ -z "${FLAGCX_EMULATED:-}" ] || MPIRUN+=(-x FLAGCX_EMULATED)
for t in allreduce allgather alltoall; do
    mpicxx -std=c++17 -O2 -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX -I"$FLAGCX/flagcx/include" -I"$FLAGCX/test/include" \
        -I"$FLAGCX/third-party/json/single_include" -o "$WORK/perf_$t" "$FLAGCX/test/perf/host_api/test_$t.cpp" \
        "$FLAGCX/test/tools.cc" "$FLAGCX/test/perf_common.cc" -L"$FLAGCX/build/lib" -Wl,--no-as-needed \
        -Wl,-rpath,"$FLAGCX/build/lib" -lflagcx || { failed "building perf_$t"; continue; }
    timeout 600 "${MPIRUN[@]}" "$WORK/perf_$t" -b 1M -e 256M -f 4 -w 5 -n 20 -d float -o sum 2>&1 | tee "$LOGS/perf_$t.log"
    rc=${PIPESTATUS[0]}
    rows=$(grep -c '^Comm size: ' "$LOGS/perf_$t.log")
    [ "$rc" = 0 ] && [ "$rows" -ge 5 ] || failed "perf_$t (exit $rc, $rows result rows)"
done
fi

echo
how=""
[ "${EMULATED:-0}" = 1 ] && how=" (EMULATED vendor runtimes, not GPUs)"
if [ ${#FAILURES[@]} -eq 0 ]; then
    echo "capi-gpu: PASS$how (steps $STEPS)"
    exit 0
fi
echo "capi-gpu: FAIL$how"
printf '  %s\n' "${FAILURES[@]}"
exit 1
