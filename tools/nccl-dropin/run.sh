#!/usr/bin/env bash
# Unmodified NCCL programs on flagcx-go's libnccl.so.2 (docs/nccl.md), on a
# machine with NVIDIA GPUs, NVIDIA's NCCL with its headers (libnccl-dev),
# CUDA under /usr/local/cuda, OpenMPI and python3 with torch; no internet:
#
#  1. nccl-tests built from its sources (tools/nccl-dropin/prepare.sh)
#     against NCCL's own headers and linked with -lnccl against
#     build/lib/libnccl.so.2; every *_perf binary with -g 1 -c 1 on one GPU,
#     and the reducing ones with -o mulsum (ncclRedOpCreatePreMulSum) for
#     every type but fp8;
#     with 2 or more GPUs, each again with -g 2 (one process, one thread
#     driving both GPUs: grouped ncclCommInitRank and grouped collectives
#     over two communicators), under mpirun -np 2, then split into two
#     clusters (FLAGCX_CLUSTER_SPLIT_LIST=1,1);
#  2. torch.distributed's "nccl" backend with the drop-in under LD_PRELOAD
#     (tools/nccl-dropin/torch_nccl.py): one rank, then with 2 or more GPUs
#     two ranks, exact for every collective, coalesced all_reduces and
#     ReduceOp.PREMUL_SUM (ncclRedOpCreatePreMulSum, host and device
#     factors, where torch exposes _make_nccl_premul_sum), and
#     all_reduce at 64 and 256 MiB timed beside torch on NVIDIA's NCCL in
#     the same call (separate processes: one process cannot hold both under
#     the same names); then split 1,1, exact.
#
#   tools/nccl-dropin/run.sh            (STEPS="1 2" by default)
#
# The nvidia plugin must load NVIDIA's NCCL, never the drop-in: every run
# prints the library it loaded (FLAGCX_DEBUG=INFO, "loaded ccl"), and the
# run fails if it was build/lib's. Logs go to $OUT (the device machine's
# output folder) or build/nccl-dropin. Exit status 0 when every check passed
# and all_reduce at >= 64 MiB is within 3% of NVIDIA's NCCL (MIN_RATIO).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
SRC=$REPO/build/nccl-tests-src
PY=${PY:-/opt/torch/.venv/bin/python3}
LOGS=${OUT:-$REPO/build/nccl-dropin}
MIN_RATIO=${MIN_RATIO:-0.97}
STEPS=${STEPS:-1 2}
mkdir -p "$LOGS"
export NCCL_NVLS_ENABLE=0 # NVLink SHARP needs multicast, which these machines leave off
export FLAGCX_BACKEND=nvidia FLAGCX_PLUGIN_DIR=$REPO/build/plugins FLAGCX_DEBUG=INFO FLAGCX_DEBUG_SUBSYS=INIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DROPIN=$REPO/build/lib/libnccl.so.2
FAILURES=()
step() { echo; echo "=== $*"; }
failed() { echo "FAILED: $*"; FAILURES+=("$*"); }
for f in "$DROPIN" build/lib/libflagcx.so build/plugins/libflagcx-nvidia.so; do
    [ -f "$f" ] || { echo "missing $f: run make where Go is and carry build/" >&2; exit 2; }
done
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$NGPU" -ge 1 ] || { echo "no NVIDIA GPUs here" >&2; exit 2; }
WORK=$(mktemp -d /tmp/nccl-dropin.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# checkLog LOG WHAT: the run's own verdict, and the plugin on NVIDIA's NCCL.
checkLog() {
    local log=$1 what=$2
    if grep -q "loaded ccl .* from $REPO/build/lib" "$log"; then
        failed "$what: the nvidia plugin loaded the drop-in as NVIDIA's NCCL"
    fi
    grep -m1 "loaded ccl" "$log" | sed 's/^/    /'
}

# ntRun LABEL LAUNCH...: every nccl-tests binary (or those of $BINS), -g $G
# (1 by default) -c 1, with $EXTRA's arguments.
ntRun() {
    local label=$1 g=${G:-1} bins=()
    shift
    if [ -n "${BINS:-}" ]; then
        for b in $BINS; do bins+=("$WORK/nt/$b"); done
    else
        bins=("$WORK"/nt/*_perf)
    fi
    for bin in "${bins[@]}"; do
        local name log
        name=$(basename "$bin")
        log=$LOGS/$label-$name.log
        # shellcheck disable=SC2086 # EXTRA is a list of arguments
        LD_LIBRARY_PATH=$REPO/build/lib "$@" "$bin" -b 8 -e 32M -f 8 -g "$g" -c 1 -w 2 -n 5 ${EXTRA:-} >"$log" 2>&1
        local rc=$?
        if [ $rc -ne 0 ] || ! grep -q "Out of bounds values : 0 OK" "$log" || grep -q -E "FAILED|\*\*\*" "$log"; then
            failed "$label $name (exit $rc): $(grep -m3 -E 'FAIL|error|Error|\*\*\*' "$log" | tr '\n' ' ')"
        else
            echo "ok $label $name: $(grep -m1 'Avg bus bandwidth' "$log")"
        fi
        checkLog "$log" "$label $name" | head -1
    done
}

if [[ " $STEPS " == *" 1 "* ]]; then
    step "1. nccl-tests against NCCL's headers, linked with build/lib/libnccl.so.2"
    [ -f "$SRC/src/Makefile" ] || { echo "no nccl-tests sources in $SRC: run tools/nccl-dropin/prepare.sh" >&2; exit 2; }
    cp -r "$SRC" "$WORK/src"
    mkdir -p "$WORK/ncclhome/lib" "$WORK/ncclhome/include"
    # -lnccl finds the drop-in; the linker checks it against libflagcx.so,
    # which it needs, beside it.
    ln -s "$DROPIN" "$WORK/ncclhome/lib/libnccl.so"
    ln -s "$REPO/build/lib/libflagcx.so" "$WORK/ncclhome/lib/libflagcx.so"
    MPI_HOME=$(dirname "$(mpicc --showme:incdirs | tr ' ' '\n' | head -1)")
    if make -C "$WORK/src/src" -j"$(nproc)" MPI=1 MPI_HOME="$MPI_HOME" NCCL_HOME="$WORK/ncclhome" CUDA_HOME=/usr/local/cuda \
        NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR="$WORK/nt" >"$LOGS/nccl-tests-build.log" 2>&1; then
        echo "built $(ls "$WORK"/nt/*_perf | wc -l) binaries; $(ldd "$WORK/nt/all_reduce_perf" | grep libnccl)"
        ldd "$WORK/nt/all_reduce_perf" | grep -q "libnccl.so.2 => $REPO/build/lib" ||
            LD_LIBRARY_PATH=$REPO/build/lib ldd "$WORK/nt/all_reduce_perf" | grep -q "$REPO/build/lib/libnccl.so.2" ||
            failed "nccl-tests do not resolve libnccl.so.2 to the drop-in"
        ntRun g1
        # ncclRedOpCreatePreMulSum: nccl-tests' "mulsum" op (a host scalar per
        # rank, made and destroyed around each call) on the reducing binaries.
        REDUCING="all_reduce_perf reduce_perf reduce_scatter_perf"
        for d in int8 uint8 int32 int64 uint64 half float double bfloat16; do
            BINS=$REDUCING EXTRA="-o mulsum -d $d" ntRun "g1-mulsum-$d"
        done
        if [ "$NGPU" -ge 2 ]; then
            G=2 ntRun g2
            for d in int32 half float bfloat16; do
                G=2 BINS=$REDUCING EXTRA="-o mulsum -d $d" ntRun "g2-mulsum-$d"
            done
            MPI=(mpirun -np 2 --bind-to none -x LD_LIBRARY_PATH -x FLAGCX_BACKEND -x FLAGCX_PLUGIN_DIR -x FLAGCX_DEBUG -x FLAGCX_DEBUG_SUBSYS -x NCCL_NVLS_ENABLE)
            ntRun np2 "${MPI[@]}"
            ntRun np2-split11 "${MPI[@]}" -x FLAGCX_CLUSTER_SPLIT_LIST=1,1
        fi
    else
        failed "nccl-tests build: $(grep -m5 -E 'error|undefined' "$LOGS/nccl-tests-build.log" | tr '\n' ' ')"
    fi
fi

if [[ " $STEPS " == *" 2 "* ]]; then
    step "2. torch.distributed's nccl backend on the drop-in"
    T=$REPO/tools/nccl-dropin/torch_nccl.py
    if LD_PRELOAD=$DROPIN "$PY" "$T" --no-timing --want-lib "$DROPIN" >"$LOGS/torch-1rank.log" 2>&1; then
        echo "ok torch 1 rank: $(grep -m1 mapped "$LOGS/torch-1rank.log")"
    else
        failed "torch 1 rank: $(grep -m3 -E 'FAIL|Error' "$LOGS/torch-1rank.log" | tr '\n' ' ')"
    fi
    checkLog "$LOGS/torch-1rank.log" "torch 1 rank"
    grep -m1 -E "premul_sum|_make_nccl_premul_sum" "$LOGS/torch-1rank.log" | sed 's/^/    /'
    if [ "$NGPU" -ge 2 ]; then
        RUN=("$PY" -m torch.distributed.run --nproc_per_node 2 --master_port 29561 "$T")
        LD_PRELOAD=$DROPIN "${RUN[@]}" --want-lib "$DROPIN" >"$LOGS/torch-2ranks-dropin.log" 2>&1 ||
            failed "torch 2 ranks on the drop-in: $(grep -m3 -E 'FAIL|Error' "$LOGS/torch-2ranks-dropin.log" | tr '\n' ' ')"
        checkLog "$LOGS/torch-2ranks-dropin.log" "torch 2 ranks"
        "${RUN[@]}" --want-lib nvidia/nccl >"$LOGS/torch-2ranks-nccl.log" 2>&1 ||
            failed "torch 2 ranks on NVIDIA's NCCL: $(grep -m3 -E 'FAIL|Error' "$LOGS/torch-2ranks-nccl.log" | tr '\n' ' ')"
        FLAGCX_CLUSTER_SPLIT_LIST=1,1 LD_PRELOAD=$DROPIN "${RUN[@]}" --no-timing --want-lib "$DROPIN" >"$LOGS/torch-2ranks-split11.log" 2>&1 ||
            failed "torch 2 ranks split 1,1: $(grep -m3 -E 'FAIL|Error' "$LOGS/torch-2ranks-split11.log" | tr '\n' ' ')"
        grep -q heterogeneous "$LOGS/torch-2ranks-split11.log" || failed "torch split 1,1: no heterogeneous layout in the log"
        echo "| size | drop-in busbw GB/s | NVIDIA's NCCL busbw GB/s | ratio |"
        echo "|---|---|---|---|"
        while read -r _ bytes _ bw; do
            ref=$(awk -v b="$bytes" '$1 == "allreduce" && $2 == b {print $4}' "$LOGS/torch-2ranks-nccl.log")
            ratio=$(awk -v a="$bw" -v b="$ref" 'BEGIN {if (b > 0) printf "%.3f", a / b}')
            echo "| $bytes | $bw | $ref | $ratio |"
            awk -v r="$ratio" -v m="$MIN_RATIO" 'BEGIN {exit !(r != "" && r + 0 >= m + 0)}' ||
                failed "all_reduce $bytes: drop-in/NCCL $ratio < $MIN_RATIO"
        done < <(grep '^allreduce ' "$LOGS/torch-2ranks-dropin.log")
    fi
fi

echo
if [ ${#FAILURES[@]} -eq 0 ]; then
    echo "ALL PASSED (logs in $LOGS)"
    exit 0
fi
echo "${#FAILURES[@]} FAILED (logs in $LOGS):"
printf '  %s\n' "${FAILURES[@]}"
exit 1
