#!/usr/bin/env bash
# Builds the Debian package into target/debian/: the binary of the `dist` profile (fat LTO, one
# codegen unit, stripped), and beside it what that very binary generates: its man pages
# (`notifio man --dir`), its bash, zsh and fish completions (`notifio completions SHELL`) and
# its systemd user unit (`notifio service unit`), plus the README and the licences
# (crates/notifio/Cargo.toml, [package.metadata.deb]). Needs cargo-deb:
#   cargo install cargo-deb --locked
#   packaging/deb.sh                    # target/debian/notifio_<version>-1_<arch>.deb
#   PROFILE=release packaging/deb.sh    # a quicker build of a larger, slower binary (not a release)
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-dist}
target=${CARGO_TARGET_DIR:-$PWD/target}
out="$target/$profile"
[[ $profile == dev ]] && { echo "the dev profile is not packaged" >&2; exit 2; }
command -v cargo-deb >/dev/null || { echo "needs cargo-deb: cargo install cargo-deb --locked" >&2; exit 2; }

cargo build --locked --profile "$profile" -p notifio
bin="$out/notifio"
assets="$out/assets"
rm -rf "$assets"
mkdir -p "$assets/completions"
# The unit and the pages must not depend on the packager's own config.
gen() { env -u NOTIFIO_CONFIG "$bin" "$@"; }
gen man --dir "$assets/man" >/dev/null
gzip -9n "$assets"/man/*.1
gen completions bash >"$assets/completions/notifio.bash"
gen completions zsh >"$assets/completions/_notifio"
gen completions fish >"$assets/completions/notifio.fish"
gen service unit --exe /usr/bin/notifio >"$assets/notifio.service"

cargo deb --locked --no-build --profile "$profile" -p notifio
