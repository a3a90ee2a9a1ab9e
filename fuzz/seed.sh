#!/usr/bin/env bash
# Seeds fuzz/corpus/<target>/ from the repo's examples and, where they are, the real pages
# (docs/fuzzing.md): $NOTIFIO_REAL_PAGES, else ../shared/fixtures beside the repository, as the
# tests find them. The real pages are never committed; without them this says so and goes on.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=..
FIX=${NOTIFIO_REAL_PAGES:-$ROOT/../shared/fixtures}
OWN=$ROOT/crates/notifio/tests/fixtures
c() { mkdir -p "corpus/$1"; }
for t in parse_retry_after classify cookies_txt config extract_idealista extract_immoscout24 extract_facebook extract_generic extract_profiles extract_auto; do c "$t"; done
# Committed seeds (small, hand-written or minimised by `cargo fuzz cmin`).
for t in seeds/*/; do t=$(basename "$t"); c "$t"; cp seeds/"$t"/* "corpus/$t/" 2>/dev/null || true; done
# config: every ```toml block of docs/config.md, and the starter file.
python3 - "$ROOT/docs/config.md" "$ROOT/crates/notifio/src/config/starter.rs" <<'PY'
import re, sys
md = open(sys.argv[1]).read()
for i, block in enumerate(re.findall(r"```toml\n(.*?)```", md, re.S)):
    open(f"corpus/config/doc{i:02}", "w").write(block)
rs = open(sys.argv[2]).read()
m = re.search(r'pub const STARTER: &str = r#"(.*?)"#;', rs, re.S)
if m:
    open("corpus/config/starter", "w").write(m.group(1))
PY
# extractors: the hand-made edge cases, and the real pages where they are.
cp "$OWN/idealista_edge_cases.html" "$OWN/datadome_block.html" "$OWN/no_results.html" corpus/extract_idealista/
cp "$OWN/is24_cards.html" "$OWN/no_results.html" corpus/extract_immoscout24/
real() { if [ -e "$FIX/$1" ]; then cp "$FIX/$1" "corpus/$2/"; else echo "real page $1 not found in $FIX: not seeded"; fi; }
real idealista_es_search.html extract_idealista
real immoscout24_block_geetest.html extract_immoscout24
real immoscout24_resultlist_2020.json extract_immoscout24
cp "$OWN/fb_search.html" "$OWN/fb_logged_out.html" "$OWN/no_results.html" corpus/extract_facebook/
# generic: first byte picks the spec (0 selector+id_attr, 1 selector+first link, 2 link, 3 JSON-LD).
for m in 0 1; do { printf "\\x0$m"; cat "$OWN/generic_cards.html"; } > corpus/extract_generic/cards$m; done
{ printf '\x02'; cat "$OWN/generic_links.html"; } > corpus/extract_generic/links
{ printf '\x03'; cat "$OWN/generic_jsonld.html"; } > corpus/extract_generic/jsonld
{ printf '\x02'; cat "$OWN/no_results.html"; } > corpus/extract_generic/none
# profiles: first byte picks a built-in profile file (in catalog order), then the portal's page.
i=0; for f in "$OWN"/sites/*.html; do [ -e "$f" ] || continue; { printf "\\x$(printf %02x $i)"; cat "$f"; } > "corpus/extract_profiles/$(basename "$f" .html)"; i=$((i+1)); done
{ printf '\x00'; cat "$OWN/no_results.html"; } > corpus/extract_profiles/none
# auto mode: every real page in the repository (with a profile and without), and the own cards.
cp "$OWN"/sites/*.html "$OWN"/auto/*.html "$OWN/generic_cards.html" "$OWN/no_results.html" corpus/extract_auto/ 2>/dev/null || true
echo "seeded: $(for d in corpus/*/; do printf '%s=%s ' "$(basename "$d")" "$(ls "$d" | wc -l)"; done)"
