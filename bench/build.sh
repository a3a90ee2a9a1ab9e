#!/usr/bin/env bash
# The first build of Notifio, from an empty target directory, per profile (issue 38):
#   bench/build.sh                       # release and dist: wall and CPU time, peak memory, sizes
#   bench/build.sh release               # one profile
#   bench/build.sh release --config 'profile.release.lto="thin"' --label thin   # a variant
#   bench/build.sh release dist --watch 300 --pairs 3   # then their watch CPU side by side
#   bench/build.sh release dist --keep --watch 300      # the comparison only, on the last builds
# Builds go to target/bench-build/PROFILE[-LABEL]; method and figures: docs/benchmarks/build.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$(dirname "$here")"
if [[ " $* " == *" --watch "* ]]; then
    echo "building the fake portal the watch benchmark serves pages from…" >&2
    CARGO_TARGET_DIR="$PWD/target" cargo build --release -q --locked -p fake-portal >&2
fi
exec python3 "$here/build.py" "$@"
