#!/usr/bin/env bash
# The browser benchmark (issue 22): Notifio (`fetch = "browser"`) vs changedetection.io 0.60.10
# with its Playwright fetcher vs a minimal Playwright script reusing one tab, over the same 50
# pages of the fake portal, all on Debian's chromium on 127.0.0.1; then the 20-image page with
# and without `[browser] block`, and a 5-minute `watch` soak of 100 searches over 10 browser
# sites. The peers go into a throwaway venv outside the repo (pip's `playwright` package: its
# Node driver only, no browser download), removed at the end. Report: Markdown on stdout,
# progress on stderr. Method and figures: docs/benchmarks/browser.md.
#
#   bench/browser.sh                                  # everything, 3 rounds (~20 min)
#   ROUNDS=5 bench/browser.sh
#   PARTS=pages TOOLS=notifio,floor bench/browser.sh  # parts: pages,images,soak
#   BROWSER_VENV=/some/venv bench/browser.sh          # reuse a venv (development only)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
cd "$root"

command -v chromium >/dev/null || {
  echo "bench/browser.sh needs Debian's chromium (apt install chromium)" >&2
  exit 2
}
echo "building release binaries…" >&2
cargo build --release -q -p notifio -p fake-portal >&2

venv=${BROWSER_VENV:-}
cleanup() { [[ -z "${BROWSER_VENV:-}" && -n "${venv:-}" ]] && rm -rf "$venv"; return 0; }
trap cleanup EXIT
if [[ -z "$venv" ]]; then
  venv=$(mktemp -d /tmp/notifio-browser-venv.XXXXXX)
  echo "installing changedetection-io 0.60.10 and playwright 1.65.2 into $venv…" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check \
    'changedetection-io==0.60.10' 'playwright==1.65.2' >&2
fi

echo "## Browser benchmark (bench/browser.sh, $(date -u +%Y-%m-%dT%H:%MZ), $(chromium --version 2>/dev/null))"
echo
timeout 5400 python3 "$here/browser.py" --venv "$venv" --rounds "${ROUNDS:-3}" \
  --tools "${TOOLS:-notifio,changedetection.io,floor}" --parts "${PARTS:-pages,images,soak}" \
  ${BENCH_JSON:+--json "$BENCH_JSON"}
