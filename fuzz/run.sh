#!/usr/bin/env bash
# Runs one fuzz target for SECONDS (default 600) on one core; see docs/fuzzing.md.
# Usage: fuzz/run.sh <target> [seconds] [extra libFuzzer flags...]
set -euo pipefail
cd "$(dirname "$0")"
target=$1
secs=${2:-600}
shift $(( $# >= 2 ? 2 : 1 ))
dict=()
case $target in
  classify) dict=(-dict=dicts/classify.dict) ;;
  config) dict=(-dict=dicts/config.dict) ;;
esac
[ -d "corpus/$target" ] || ./seed.sh
# Only stable Rust is needed: RUSTC_BOOTSTRAP=1 lets it accept cargo-fuzz's -Z flags.
# -s none: no sanitizer (the code under test is safe Rust); -a: debug assertions and
# overflow checks on; 16 codegen units: a much faster build on a small machine.
RUSTC_BOOTSTRAP=1 exec cargo fuzz run -s none -a --codegen-units 16 "$target" "corpus/$target" -- \
  -max_total_time="$secs" -rss_limit_mb=2048 -max_len=262144 -timeout=10 \
  -print_final_stats=1 "${dict[@]}" "$@"
