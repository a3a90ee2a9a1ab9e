#!/usr/bin/env bash
# `notifio watch` with 1,000 searches over 100 fake sites (~300 KB pages), interval 30 s (issue 7).
#   bench/watch.sh                 # 5 minutes, the portal sends no ETags (every check is a full page)
#   DURATION=60 bench/watch.sh     # a quick run
#   VALIDATORS=1 bench/watch.sh    # the portal sends ETags: unchanged pages come back as 304
#   NEW_EVERY=never bench/watch.sh # no new listings: every check after the first is unchanged
#   CONCURRENCY=4 bench/watch.sh   # checks in flight at once (default 16; the product's is 4)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$(dirname "$here")"
echo "building release binaries…" >&2
cargo build --release -q -p notifio -p fake-portal >&2
flags=()
[[ -n "${VALIDATORS:-}" ]] && flags+=(--validators)
flags+=(--new-every "${NEW_EVERY:-30s}" --concurrency "${CONCURRENCY:-16}")
timeout $(( ${DURATION:-300} + 120 )) python3 "$here/watch.py" --duration "${DURATION:-300}" "${flags[@]}"
