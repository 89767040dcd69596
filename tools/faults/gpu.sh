#!/usr/bin/env bash
# Issue 48's checks on a machine with one real GPU (run from the
# repository root after `make`): relay conformance (the abort rule of
# flagcx_plugin.h), the 700 B AllReduce on nvidia:1,host:3 beside an
# older build, relay exactness, and faults beside real NCCL (run.sh).
#   NEW=bin/flagcx:build/plugins OLD=/tmp/old/flagcx:/tmp/old/plugins tools/faults/gpu.sh
# OLD is optional; each build is "flagcx:plugindir".
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0
new=${NEW:-bin/flagcx:build/plugins}
builds="new=$new${OLD:+ old=$OLD}"
nvidia-smi -L
for spec in $builds; do
	label=${spec%%=*} exe=${spec#*=}
	dir=${exe#*:} exe=${exe%%:*}
	echo "== $label: conformance of relayReduce and reduceLocal"
	"$exe" --plugin-dir "$dir" conformance --plugin nvidia --np 2 --run 'relay|reducelocal' 2>&1 | tail -2
done
FLAGCX_BINS="$builds" ROUNDS=${ROUNDS:-6} LAYOUTS="nvidia:1,host:3" EXACT=0 tools/hetero-bench/latency.sh
echo "== new: exactness at relay sizes and around"
exe=${new%%:*} dir=${new#*:}
"$exe" --plugin-dir "$dir" bench all --ranks nvidia:1,host:2 -b 4 -e 64K -f 4 -d all -o all -c 1 -w 1 -n 3 2>&1 | grep -E "Out of bounds|error" | head -3
"$exe" --plugin-dir "$dir" bench allreduce --ranks nvidia:1,host:3 -b 8 -e 16K -f 2 -d all -o all -c 1 -w 5 -n 50 2>&1 | grep -E "Out of bounds|error" | head -3
echo "== faults beside real NCCL"
for spec in $builds; do
	label=${spec%%=*} exe=${spec#*=}
	for f in "2 KILL allreduce" "2 STOP allreduce" "1 KILL broadcast" "0 KILL reduce"; do
		set -- $f
		FLAGCX=${exe%%:*} PLUGINS=${exe#*:} LAYOUT=nvidia:1,host:2 VICTIM=$1 SIG=$2 COLL=$3 timeout 120 tools/faults/run.sh 2>&1 |
			sed "s/^/$label: /" | cut -c1-300
	done
done
