#!/usr/bin/env bash
# Prepares what tools/capi-gpu/run.sh needs from outside this repository,
# on a machine that can reach it: FlagCX's torch plugin and perf test
# sources, and nlohmann/json's single header (FlagCX's torch plugin includes
# it), into build/flagcx-src, which the GPU machine gets carried along.
#
#   tools/capi-gpu/prepare.sh <FlagCX checkout or git dir> [<nlohmann/json checkout or git dir>]
#
# A git dir (a bare mirror) is read at HEAD; a checkout is copied as it is.
# Without the json argument, FlagCX's own third-party/json submodule must be
# checked out.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: $0 <FlagCX checkout or git dir> [<nlohmann/json checkout or git dir>]" >&2; exit 2; }
out=build/flagcx-src
rm -rf "$out"
mkdir -p "$out"

# copyTree SRC DEST PATH...: PATHs of a checkout or of a git dir's HEAD.
copyTree() {
    local src=$1 dest=$2
    shift 2
    if [ -d "$src/.git" ] || [ ! -d "$src/objects" ]; then
        (cd "$src" && tar -cf - "$@") | tar -xf - -C "$dest"
    else
        git --git-dir="$src" archive HEAD "$@" | tar -xf - -C "$dest"
    fi
}

# FlagCX: its torch plugin, its perf tests and what they compile with, and
# its own header (for comparison only: run.sh builds against build/include).
copyTree "$1" "$out" plugin/torch test/include test/tools.cc test/perf_common.cc test/perf/host_api flagcx/include/flagcx.h
mkdir -p "$out/third-party/json"
if [ $# -ge 2 ]; then
    copyTree "$2" "$out/third-party/json" single_include/nlohmann/json.hpp
elif [ -f "$1/third-party/json/single_include/nlohmann/json.hpp" ]; then
    cp -r "$1/third-party/json/single_include" "$out/third-party/json/"
else
    echo "$0: no nlohmann/json.hpp: pass a nlohmann/json checkout or git dir as the second argument" >&2
    exit 1
fi
(cd "$1" 2>/dev/null && git rev-parse HEAD 2>/dev/null || git --git-dir="$1" rev-parse HEAD) > "$out/FLAGCX_COMMIT" || true
du -sh "$out"
echo "prepared $out: carry it (with build/lib, build/include, build/plugins) to the GPU machine and run tools/capi-gpu/run.sh there"
