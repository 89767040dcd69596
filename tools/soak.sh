#!/usr/bin/env bash
# make soak: the tests of faults, revoke and shrink, one-sided and the
# plans that run, each ROUNDS times (default 20) while BUSY busy loops
# (default 3) load the machine, so that a race that shows one run in ten
# shows here. A failure is a bug in the code or in the test: find its
# cause (the log of the failed run is kept); never retry it away.
#
#   tools/soak.sh            # every group, 20 rounds, 3 busy loops
#   ROUNDS=5 SOAK_GROUPS=fault tools/soak.sh
#
# Test binaries are built once; each round runs every group's binary.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
ROUNDS=${ROUNDS:-20}
BUSY=${BUSY:-3}
SOAK_GROUPS=${SOAK_GROUPS:-fault revoke onesided plans}
out=${SOAK_DIR:-$(mktemp -d -t flagcx-soak.XXXXXX)}
mkdir -p "$out"

# group -> package and -run pattern. The fault seed is the one issue 48
# named; TestFaultInjection draws a new case per collective otherwise.
declare -A pkg run
pkg[fault]=./cmd/flagcx run[fault]='^(TestFaultInjection|TestFaultEndsInTime|TestBenchOnFailureShrink|TestBenchShrinkAroundStoppedRank|TestBenchPluginCrashInACollective)$'
pkg[revoke]=./core run[revoke]='^(TestRevokeAndShrink|TestPlannedShrink|TestAbortDuringShmCollective|TestWatchdogPluginStuckInAllReduce|TestAsyncErrorFromVendor|TestShmRelayAbandoned)$'
pkg[onesided]=./core run[onesided]='^(TestOneSidedExact|TestOneSidedPeerNeverSignals|TestOneSidedWindowFreedUnderUse|TestOneSidedMisuse)$'
pkg[capi]=./capi run[capi]='^(TestCAPIOneSided|TestAsyncVendorError)$'
pkg[plans]=./core run[plans]='^(TestPlansThatRunArePlansThatPrint|TestShmRelayPipelined)$'
SOAK_GROUPS="${SOAK_GROUPS/onesided/onesided capi}"

for g in $SOAK_GROUPS; do
	[[ -n ${pkg[$g]:-} ]] || { echo "soak: no group $g (fault, revoke, onesided, plans)" >&2; exit 2; }
	CGO_ENABLED=0 "$GO" test -c -o "$out/$g.test" "${pkg[$g]}"
done

busy=()
cleanup() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for _ in $(seq "$BUSY"); do (while :; do :; done) & busy+=($!); done

failed=0
for round in $(seq "$ROUNDS"); do
	for g in $SOAK_GROUPS; do
		log="$out/$g.$round.log"
		start=$SECONDS
		# A test binary runs in its package's directory, as go test runs it.
		if (cd "${pkg[$g]}" && FLAGCX_FAULT_SEED=${FLAGCX_FAULT_SEED:-} "$out/$g.test" -test.count=1 -test.timeout 20m -test.run "${run[$g]}" >"$log" 2>&1); then
			echo "round $round/$ROUNDS $g: ok ($((SECONDS - start)) s)"
		else
			echo "round $round/$ROUNDS $g: FAILED ($((SECONDS - start)) s), log $log"
			grep -E -- '^\s*--- FAIL|Error:|seed [0-9]+' "$log" | head -n 12 || true
			failed=$((failed + 1))
		fi
	done
done
echo "soak: $failed failed run(s) of $((ROUNDS * $(wc -w <<<"$SOAK_GROUPS"))) under $BUSY busy loops; logs in $out"
[[ $failed == 0 ]]
