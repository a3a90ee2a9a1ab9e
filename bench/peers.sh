#!/usr/bin/env bash
# Notifio vs urlwatch 2.29 vs changedetection.io 0.60.10 on the fake portal (issue 9), then the
# politeness scenario. Everything on 127.0.0.1; the peers go into a throwaway venv (pip's cache
# makes that quick), removed at the end. Report: Markdown on stdout, progress on stderr.
#
#   bench/peers.sh                      # 200 pages of ~300 KB, all three tools, + politeness
#   PAGES=50 TOOLS=notifio,urlwatch bench/peers.sh
#   SKIP_POLITENESS=1 bench/peers.sh
#   PEERS_VENV=/some/venv bench/peers.sh   # reuse a venv that has both (development only)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
cd "$root"

echo "building release binaries…" >&2
cargo build --release -q -p notifio -p fake-portal >&2

venv=${PEERS_VENV:-}
cleanup() { [[ -z "${PEERS_VENV:-}" && -n "${venv:-}" ]] && rm -rf "$venv"; return 0; }
trap cleanup EXIT
if [[ -z "$venv" ]]; then
  venv=$(mktemp -d /tmp/notifio-peers-venv.XXXXXX)
  echo "installing urlwatch 2.29 and changedetection-io 0.60.10 into $venv…" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check \
    'urlwatch==2.29' 'changedetection-io==0.60.10' >&2
fi

echo "## Same workload (bench/peers.sh, $(date -u +%Y-%m-%dT%H:%MZ))"
echo
timeout 3600 python3 "$here/peers.py" --venv "$venv" --pages "${PAGES:-200}" \
  --page-bytes "${PAGE_BYTES:-300000}" --tools "${TOOLS:-notifio,urlwatch,changedetection.io}"
if [[ -z "${SKIP_POLITENESS:-}" ]]; then
  echo
  echo "## Politeness"
  echo
  timeout 1200 python3 "$here/politeness.py" --venv "$venv" \
    --tools "${TOOLS:-notifio,urlwatch,changedetection.io}"
fi
