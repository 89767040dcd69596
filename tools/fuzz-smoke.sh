#!/usr/bin/env bash
# Runs each fuzz target ("pkg:FuzzName" arguments) for FUZZTIME on one
# worker. A run that ends in nothing but "context deadline exceeded" (no
# failing input written) is the Go fuzz coordinator's own race at the end
# of a -fuzztime window (golang/go#75804, fixed in Go 1.27): under load a
# worker still busy when the window closes is reported as a failure. Such
# a run is repeated once; any other failure, or the race twice, fails.
set -euo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-3s}
for t in "$@"; do
	pkg=${t%%:*} name=${t#*:}
	echo "fuzz $name ($pkg, $FUZZTIME)"
	for try in 1 2; do
		if out=$("$GO" test -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" -parallel 1 "$pkg" 2>&1); then
			echo "$out" | tail -n 3
			break
		fi
		if [[ $try == 1 && $out == *"context deadline exceeded"* && $out != *"Failing input written"* ]]; then
			echo "fuzz $name: the coordinator's end-of-window race (golang/go#75804), once more"
			continue
		fi
		echo "$out"
		exit 1
	done
done
