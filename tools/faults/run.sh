#!/usr/bin/env bash
# A fault on a running bench, as TestFaultEndsInTime does on the emulated
# runtime, for a machine with the real one: start COLL on LAYOUT, wait for
# the header and DELAY more seconds, send SIG to rank VICTIM, and print
# how long after the fault each survivor ended and what every rank said.
#   LAYOUT=nvidia:1,host:2 VICTIM=2 SIG=KILL tools/faults/run.sh
# FLAGCX (bin/flagcx), PLUGINS (build/plugins), COLL (allreduce), ARGS
# (bench flags), FLAGCX_TIMEOUT (3) override the defaults. The job must
# end on its own within FLAGCX_TIMEOUT + 2 s of the fault for each
# survivor; the script exits 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/../.."
flagcx=${FLAGCX:-bin/flagcx}
plugins=${PLUGINS:-build/plugins}
layout=${LAYOUT:-nvidia:1,host:2}
coll=${COLL:-allreduce}
victim=${VICTIM:-2}
sig=${SIG:-KILL}
delay=${DELAY:-0.3}
export FLAGCX_TIMEOUT=${FLAGCX_TIMEOUT:-3} NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
args=${ARGS:-"-b 16K -e 16M -f 1024 -d all -w 1 -n 100 -c 0"}
# since T: seconds from T (date +%s.%N) to now.
since() { awk -v t0="$1" -v t1="$(date +%s.%N)" 'BEGIN {printf "%.3f", t1 - t0}'; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$flagcx" --plugin-dir "$plugins" bench "$coll" --ranks "$layout" $args >"$tmp/out" 2>"$tmp/err" &
launcher=$!
for _ in $(seq 600); do grep -q "Using devices" "$tmp/out" && break; sleep 0.05; done
sleep "$delay"
declare -A pid
for p in $(pgrep -P "$launcher"); do
	r=$(tr '\0' '\n' </proc/"$p"/environ | sed -n 's/^FLAGCX_RANK=//p')
	pid[$r]=$p
done
kill -"$sig" "${pid[$victim]}"
t0=$(date +%s.%N)
declare -A ended
while kill -0 "$launcher" 2>/dev/null; do
	for r in "${!pid[@]}"; do
		[[ $r == "$victim" || -n ${ended[$r]:-} ]] && continue
		st=$(awk '{print $3}' /proc/"${pid[$r]}"/stat 2>/dev/null || echo X)
		[[ $st == Z || $st == X ]] && ended[$r]=$(since "$t0")
	done
	sleep 0.01
done
wait "$launcher" && rc=0 || rc=$?
for r in "${!pid[@]}"; do # ended between the last look and the launcher's exit
	[[ $r == "$victim" || -n ${ended[$r]:-} ]] || ended[$r]=$(since "$t0")
done
[[ $sig == STOP ]] && kill -KILL "${pid[$victim]}" 2>/dev/null || true
echo "== $coll on $layout, SIG$sig to rank $victim: flagcx exit $rc after $(since "$t0") s"
late=0
for r in $(echo "${!pid[@]}" | tr ' ' '\n' | sort -n); do
	[[ $r == "$victim" ]] && continue
	echo "rank $r ended ${ended[$r]:-never} s after the fault"
	if [[ -z ${ended[$r]:-} ]] || awk -v e="${ended[$r]}" -v t="$FLAGCX_TIMEOUT" 'BEGIN {exit !(e > t + 2)}'; then late=1; fi
done
grep -E "flagcx: error" "$tmp/err" | cut -c1-400 || true
exit $late
