#!/usr/bin/env bash
# Prepares what tools/nccl-dropin/run.sh needs from outside this
# repository, on a machine that can reach it: nccl-tests' sources, into
# build/nccl-tests-src, which the GPU machine gets carried along.
#
#   tools/nccl-dropin/prepare.sh [<nccl-tests checkout or git dir>]
#
# Without an argument it clones https://github.com/NVIDIA/nccl-tests. A git
# dir (a bare mirror) is read at HEAD; a checkout is copied as it is.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/nccl-tests-src
rm -rf "$out"
mkdir -p "$out"
src=${1:-}
if [ -z "$src" ]; then
    git clone --depth 1 https://github.com/NVIDIA/nccl-tests "$out"
elif [ -d "$src/objects" ] && [ ! -d "$src/.git" ]; then
    git --git-dir="$src" archive HEAD | tar -xf - -C "$out"
    git --git-dir="$src" log -1 --format='%H %s' > "$out/COMMIT"
else
    (cd "$src" && tar --exclude=.git -cf - .) | tar -xf - -C "$out"
fi
echo "nccl-tests sources in $out"
