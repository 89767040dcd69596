#!/usr/bin/env bash
# FlagCX's one-sided perf tests, unchanged (test_put, test_get and
# test_one_side_register: capi/test/flagcx-perf, FlagCX's files at the
# commit its README names), on flagcx-go's libflagcx.so on the host backend,
# under mpirun (docs/c-api.md, "FlagCX's one-sided tests"):
#
#   tools/onesided-cpu/run.sh [FlagCX source dir]   (default capi/test/flagcx-perf)
#
# A FlagCX checkout works as the argument too (its test/ tree is used; the
# stand-ins for FlagCX's internal headers stay capi/test/flagcx-perf/compat).
#
# Builds the tests with mpicxx against build/include (flagcx.h,
# flagcx_kernel.h), links them to build/lib/libflagcx.so, runs each as 2
# ranks and checks what they print: the tests do not compare data
# themselves, so they run with -p 1 (print buffer), and every byte they
# print of each chunk the receiver got (the first 64) must be the one the
# sender wrote, for every size and iteration, each exactly once;
# test_one_side_register must pass each of its phases at every size. Any
# other outcome (a skip, an error, a missing line) fails.
#
# Needs: make's build/lib and build/include; OpenMPI's mpicxx and mpirun
# (apt-get install openmpi-bin libopenmpi-dev g++; .ci/run does). Logs go
# to $OUT or build/onesided-cpu. Exit status 0 when every check passed.
#
# BACKEND=nvidia (or another plugin of build/plugins) runs the same on that
# backend's devices instead of the host (each rank on device rank % count:
# one GPU takes both ranks); with EMULATED=1 on the emulated runtimes of
# build/vendorsim, a rehearsal on a machine without them.
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
SRC=$(realpath "${1:-capi/test/flagcx-perf}")
COMPAT=$REPO/capi/test/flagcx-perf/compat
LOGS=${OUT:-$REPO/build/onesided-cpu}
BACKEND=${BACKEND:-host}
mkdir -p "$LOGS"

for f in build/lib/libflagcx.so build/include/flagcx.h build/include/flagcx_kernel.h; do
    [ -f "$f" ] || { echo "missing $f: run make first" >&2; exit 2; }
done
for tool in mpicxx mpirun; do
    command -v "$tool" >/dev/null || { echo "no $tool: apt-get install openmpi-bin libopenmpi-dev g++" >&2; exit 2; }
done

FAILURES=()
failed() { echo "FAILED: $*"; FAILURES+=("$*"); }
WORK=$(mktemp -d /tmp/onesided-cpu.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

echo "FlagCX tests: $SRC ($(grep -m1 -o '[0-9a-f]\{40\}' "$SRC/README.md" 2>/dev/null || echo "commit unknown")); flagcx-go: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "mpirun: $(mpirun --version 2>&1 | head -1)"

for t in put get one_side_register; do
    mpicxx -std=c++17 -O2 -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX -I"$REPO/build/include" -I"$COMPAT" \
        -I"$SRC/test/include" -o "$WORK/perf_$t" "$SRC/test/perf/host_api/test_$t.cpp" "$SRC/test/tools.cc" \
        -L"$REPO/build/lib" -Wl,-rpath,"$REPO/build/lib" -lflagcx || failed "building perf_$t"
done
[ ${#FAILURES[@]} -eq 0 ] || exit 1

# sizes MIN MAX FACTOR: the sizes the tests' loop visits.
sizes() {
    local s=$1
    while [ "$s" -le "$2" ]; do echo "$s"; s=$((s * $3)); done
}

# run NAME SPLIT PROG ARGS...: 2 ranks on the host backend; each rank's
# output goes to $LOGS/NAME.rank<r>.log.
run() {
    local name=$1 split=$2
    shift 2
    rm -f "$LOGS/$name".rank*.log
    local env=(FLAGCX_BACKEND="$BACKEND" FLAGCX_PLUGIN_DIR="$REPO/build/plugins" FLAGCX_TIMEOUT=60 ONESIDED_LOG="$LOGS/$name")
    [ "${EMULATED:-0}" != 1 ] || env+=(FLAGCX_EMULATED=1)
    [ -z "$split" ] || env+=(FLAGCX_CLUSTER_SPLIT_LIST="$split")
    local xs=()
    for kv in "${env[@]}"; do xs+=(-x "${kv%%=*}"); done
    echo
    echo "=== $name: mpirun -np 2 $(basename "$1") ${*:2} on $BACKEND${split:+ (FLAGCX_CLUSTER_SPLIT_LIST=$split)}"
    env "${env[@]}" timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 "${xs[@]}" \
        sh -c 'exec "$0" "$@" >"$ONESIDED_LOG.rank${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-x}}.log" 2>&1' "$@"
    local rc=$?
    for r in 0 1; do
        echo "--- rank $r"
        cat "$LOGS/$name.rank$r.log" 2>/dev/null || echo "(no output)"
    done
    if [ "$rc" != 0 ]; then
        failed "$name: mpirun exited $rc"
        return 1
    fi
    if grep -l -E 'FATAL|failed|Skipping|SKIP|requires|FAIL' "$LOGS/$name".rank*.log; then
        failed "$name: a rank reported a failure or a skip (above)"
        return 1
    fi
}

# checkData NAME WHAT ITERS SIZES...: rank 1 printed, for each size and
# iteration i < ITERS, "[rank 1] WHAT data at offset i*size, size size:"
# and then the chunk's first min(size, 64) bytes, each (0 + i) & 0xff (the
# sender's value: rank 0's rank plus the iteration), exactly once.
checkData() {
    local name=$1 what=$2 iters=$3
    shift 3
    local out
    out=$(awk -v what="$what" -v iters="$iters" -v sizes="$*" '
        function finish() {
            if (!open) return
            want = sprintf("%02x", (off / sz) % 256)
            n = (sz < 64) ? sz : 64
            if (got != n) { printf "offset %d size %d: %d bytes printed, want %d\n", off, sz, got, n; bad++ }
            if (wrong) { printf "offset %d size %d: %d bytes differ from %s (the value sent), first %s at byte %d\n", off, sz, wrong, want, first, firstAt; bad++ }
            open = 0
        }
        $0 ~ "^\\[rank 1\\] " what " data at offset [0-9]+, size [0-9]+:$" {
            finish()
            off = $(NF - 2) + 0; sz = $NF + 0
            if (sz == 0 || off % sz != 0 || off / sz >= iters) { printf "unexpected chunk: %s\n", $0; bad++; next }
            seen[sz, off / sz]++
            open = 1; got = 0; wrong = 0
            want = sprintf("%02x", (off / sz) % 256)
            next
        }
        open && /^([0-9a-f][0-9a-f] )+$/ {
            for (k = 1; k <= NF; k++) {
                if ($k != want && !wrong++) { first = $k; firstAt = got }
                got++
            }
            next
        }
        { finish() }
        END {
            finish()
            split(sizes, ss, " ")
            for (j in ss) for (i = 0; i < iters; i++) {
                c = seen[ss[j] + 0, i]
                if (c != 1) { printf "size %d iteration %d: printed %d times, want once\n", ss[j], i, c; bad++ }
                total++
            }
            printf "%d chunks checked\n", total
            exit bad > 0
        }' "$LOGS/$name.rank1.log")
    local rc=$?
    echo "$out" | sed "s/^/$name: /"
    [ "$rc" = 0 ] || failed "$name: the data rank 1 printed is not what rank 0 sent (above)"
    local rows
    rows=$(grep -c '^Size: [0-9]* bytes; Avg time: ' "$LOGS/$name.rank0.log")
    [ "$rows" = "$#" ] || failed "$name: rank 0 printed $rows result rows, want $# (one per size)"
}

# checkPhases NAME SIZES...: test_one_side_register passed each phase at
# each size, and all of them.
checkPhases() {
    local name=$1 log=$LOGS/$1.rank0.log
    shift
    for p in 1 2 3; do
        for s in "$@"; do
            grep -q "^\[Phase $p\] size=$s PASS" "$log" || failed "$name: no \"[Phase $p] size=$s PASS\""
        done
    done
    grep -q '^\[test_multi_comm_put\] ALL PHASES PASSED$' "$log" || failed "$name: no \"ALL PHASES PASSED\""
    grep -q '^\[test\] CommWindowRegister for comm1 and comm2 succeeded\.$' "$log" || failed "$name: windows not registered"
}

# test_put and test_get skip homogeneous communicators (FlagCX serves
# one-sided calls on heterogeneous ones): the split makes two clusters of
# one host rank each. Odd sizes (factor 3) make every chunk's offset and
# length unaligned.
DATA=(-b 1 -e 1M -f 3 -w 2 -n 10 -R 2 -p 1)
mapfile -t DSIZES < <(sizes 1 $((1 << 20)) 3)
run put 1,1 "$WORK/perf_put" "${DATA[@]}" && checkData put Received 10 "${DSIZES[@]}"
run get 1,1 "$WORK/perf_get" "${DATA[@]}" && checkData get Got 10 "${DSIZES[@]}"

REG=(-b 1 -e 64K -f 4 -w 1 -n 4 -R 2)
mapfile -t RSIZES < <(sizes 1 $((64 << 10)) 4)
run one_side_register 1,1 "$WORK/perf_one_side_register" "${REG[@]}" && checkPhases one_side_register "${RSIZES[@]}"
# Two ranks of one homogeneous device communicator need two devices (NCCL
# refuses two ranks of a communicator on one GPU): on a one-device machine
# the homogeneous run is left out, and the summary says so.
ndev=2
if [ "$BACKEND" != host ]; then
    emu=(); [ "${EMULATED:-0}" != 1 ] || emu=(--emulated)
    ndev=$(bin/flagcx --plugin-dir build/plugins devices "${emu[@]}" 2>/dev/null |
        awk -v b="$BACKEND" '$1 == b { n = $3 + 0 } END { print n + 0 }')
fi
if [ "$ndev" -ge 2 ]; then
    run one_side_register-homogeneous "" "$WORK/perf_one_side_register" "${REG[@]}" &&
        checkPhases one_side_register-homogeneous "${RSIZES[@]}"
else
    echo "one_side_register-homogeneous: left out: $BACKEND has $ndev device(s) here, a homogeneous communicator of 2 ranks needs 2"
    NOTE=" (homogeneous one_side_register left out: one $BACKEND device)"
fi

echo
if [ ${#FAILURES[@]} -eq 0 ]; then
    how="the $BACKEND backend"
    [ "$BACKEND" != host ] || how="the host backend"
    [ "${EMULATED:-0}" != 1 ] || how="$how (EMULATED vendor runtimes)"
    echo "onesided-cpu: PASS (test_put, test_get, test_one_side_register on $how)${NOTE:-}"
    exit 0
fi
echo "onesided-cpu: FAIL"
printf '  %s\n' "${FAILURES[@]}"
exit 1
