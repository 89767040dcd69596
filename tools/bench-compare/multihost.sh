#!/usr/bin/env bash
# flagcx across 2 emulated hosts (tools/hosts/hosts.sh) beside the raw link,
# Gloo and OpenMPI, in one run: allreduce float32 sum with PER ranks per
# host (default 1), MIN..MAX bytes by FACTOR.
#
#   link     iperf3 between host 0 and host 1, both directions at once
#            (--bidir), the rate of each direction
#   flagcx   bin/flagcx bench allreduce, ranks started by hosts.sh run
#   gloo     torch.distributed Gloo (tools/bench-compare/torch_allreduce.py,
#            one process per rank started by hosts.sh run)
#   openmpi  mpirun from host 0's network namespace; its rsh agent
#            (tools/bench-compare/hosts-rsh.sh) enters the other hosts
#
# Needs root. Installs iperf3, openmpi-bin, libopenmpi-dev and python3-torch
# with apt-get when missing. FLAGCX_BINS="bin/flagcx old=/path" compares
# builds. SKIP_GLOO=1 / SKIP_MPI=1 leave a library out.
set -euo pipefail
cd "$(dirname "$0")/../.."
PER=${PER:-1} MIN=${MIN:-8} MAX=${MAX:-268435456} FACTOR=${FACTOR:-4} WARMUP=${WARMUP:-5} ITERS=${ITERS:-20}
FLAGCX_BINS=${FLAGCX_BINS:-bin/flagcx}
PYTHON=${PYTHON:-/usr/bin/python3}
export FLAGCX_HOSTS_PREFIX=${FLAGCX_HOSTS_PREFIX:-fxcmp-}
hosts=tools/hosts/hosts.sh
np=$((2 * PER))
out=$(mktemp -d)

missing=()
command -v iperf3 >/dev/null || missing+=(iperf3)
[ -n "${SKIP_MPI:-}" ] || { command -v mpirun >/dev/null && command -v mpicc >/dev/null; } || missing+=(openmpi-bin libopenmpi-dev)
[ -n "${SKIP_GLOO:-}" ] || "$PYTHON" -c 'import torch' 2>/dev/null || missing+=(python3-torch)
if [ ${#missing[@]} -gt 0 ]; then
  echo "# installing ${missing[*]} ..." >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
[ -x bin/flagcx ] || make flagcx

cleanup() { "$hosts" down >/dev/null 2>&1 || true; rm -rf "$out"; }
trap cleanup EXIT
"$hosts" down >/dev/null 2>&1 || true
"$hosts" up 2
h1=$("$hosts" addr 1)
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r)"
echo "# 2 emulated hosts (veth on a bridge), $PER rank(s) per host, float32 sum, $WARMUP+$ITERS iterations"

# The link: each direction's rate with both running at once, the best of 2.
"$hosts" exec 1 iperf3 -s -D -1 >/dev/null
sleep 0.5
link=0
for try in 1 2; do
  "$hosts" exec 1 iperf3 -s -D -1 >/dev/null 2>&1 || true
  sleep 0.3
  r=$("$hosts" exec 0 iperf3 -c "$h1" --bidir -t 5 -J | "$PYTHON" -c '
import json, sys
e = json.load(sys.stdin)["end"]
print(min(e["sum_sent"]["bits_per_second"], e["sum_received"]["bits_per_second"]) / 8e9)' 2>/dev/null || echo 0)
  link=$(awk -v a="$link" -v b="$r" 'BEGIN { print (b > a ? b : a) }')
done
echo "# link: iperf3 --bidir, per direction: $link GB/s"

cols=()
for spec in $FLAGCX_BINS; do
  label=${spec%%=*} bin=${spec#*=}
  [ "$label" = "$spec" ] && label=flagcx
  echo "# $label ..." >&2
  "$hosts" run -n "$PER" --out "$out/$label.d" -- "$bin" bench allreduce -b "$MIN" -e "$MAX" -f "$FACTOR" \
    -w "$WARMUP" -n "$ITERS" -c 0 -d float32 -o sum || { cat "$out/$label.d"/*.err >&2; exit 1; }
  awk '$1 ~ /^[0-9]+$/ && $3 == "float32" {print $1, $6, $8}' "$out/$label.d/rank0.log" > "$out/$label"
  cols+=("$label")
done
if [ -z "${SKIP_GLOO:-}" ]; then
  echo "# gloo ..." >&2
  GLOO_SOCKET_IFNAME=eth0 "$hosts" run -n "$PER" --out "$out/gloo.d" -- "$PYTHON" tools/bench-compare/torch_allreduce.py \
    "$np" "$MIN" "$MAX" "$FACTOR" "$WARMUP" "$ITERS" || { cat "$out/gloo.d"/*.err >&2; exit 1; }
  cp "$out/gloo.d/rank0.log" "$out/gloo"
  cols+=(gloo)
fi
if [ -z "${SKIP_MPI:-}" ]; then
  echo "# openmpi ..." >&2
  mpicc -O2 -o "$out/mpi_allreduce" tools/bench-compare/mpi_allreduce.c
  # --bind-to none: each emulated host's orted sees the machine's cores as
  # its own and would bind its first rank to core 0, every host's on the
  # same core, which made small allreduces orders of magnitude slower
  # (docs/performance.md, "Figures that were in comments (issue 41)").
  ip netns exec "${FLAGCX_HOSTS_PREFIX}0" mpirun --allow-run-as-root -np "$np" --bind-to none \
    -H "${FLAGCX_HOSTS_PREFIX}0:$PER,${FLAGCX_HOSTS_PREFIX}1:$PER" \
    --mca plm_rsh_agent "$PWD/tools/bench-compare/hosts-rsh.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl self,vader,tcp --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
    -x FLAGCX_HOSTS_PREFIX "$out/mpi_allreduce" "$MIN" "$MAX" "$FACTOR" "$WARMUP" "$ITERS" > "$out/openmpi"
  cols+=(openmpi)
fi

first=${cols[0]}
{
  printf "| size |"; for c in "${cols[@]}"; do printf " %s busbw GB/s (us) |" "$c"; done
  printf " %s / link | %s / gloo | %s / openmpi latency |\n" "$first" "$first" "$first"
  printf "|---|"; for _ in "${cols[@]}"; do printf -- "---|"; done; printf -- "---|---|---|\n"
}
awk -v cols="${cols[*]}" -v dir="$out" -v first="$first" -v link="$link" "$(cat tools/bench-compare/results.awk)"'
BEGIN {
  load(cols, dir)
  for (k = 1; k <= m; k++) {
    s = order[k]
    h = label(s)
    row = "| " h " |"
    for (i = 1; i <= n; i++) row = row " " (((c[i], s) in bw) ? sprintf("%s (%s)", bw[c[i], s], us[c[i], s]) : "-") " |"
    fb = bw[first, s]; fu = us[first, s]
    row = row " " ((link > 0) ? sprintf("%.2f", fb / link) : "-") " |"
    row = row " " (((("gloo", s) in bw) && bw["gloo", s] > 0) ? sprintf("%.2f", fb / bw["gloo", s]) : "-") " |"
    row = row " " (((("openmpi", s) in us) && us["openmpi", s] > 0) ? sprintf("%.2f", fu / us["openmpi", s]) : "-") " |"
    print row
  }
}'
