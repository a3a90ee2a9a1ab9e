#!/usr/bin/env bash
# Runs the notifio that `dpkg -i` installed, from the installed files only, as a user would
# after `apt install ./notifio_*.deb`: its version names a commit, `init` writes a config
# that loads, `check` reads a fake portal on loopback and finds its listings, and the package
# put the man pages, the completions and the user unit where their programs look.
#   packaging/deb-test.sh PATH/TO/fake-portal
set -euo pipefail
portal_bin=${1:?usage: packaging/deb-test.sh PATH/TO/fake-portal}
fail() { echo "deb-test: $*" >&2; exit 1; }
[[ $(command -v notifio) == /usr/bin/notifio ]] || fail "notifio is not /usr/bin/notifio: $(command -v notifio)"

work=$(mktemp -d)
portal=""
cleanup() { [[ -n $portal ]] && kill "$portal" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

version=$(notifio --version)
echo "$version"
[[ $version =~ ^notifio\ [0-9]+\.[0-9]+\.[0-9]+\ \(commit\ [0-9a-f]{12}\)$ ]] || fail "--version does not name a commit: $version"

notifio init "$work/starter.toml"
notifio ladders --config "$work/starter.toml" >/dev/null || fail "the starter config does not load"

"$portal_bin" --sites 1 --searches 1 >"$work/portal.out" 2>/dev/null &
portal=$!
for _ in $(seq 100); do [[ -s $work/portal.out ]] && break; sleep 0.1; done
url=$(awk '{print $3; exit}' "$work/portal.out")
[[ $url == http://127.0.0.1:* ]] || fail "the fake portal printed no search URL"
cat >"$work/notifio.toml" <<TOML
[watch]
state_dir = "$work/state"
dashboard = false

[[search]]
name = "portal"
url = "$url"
listing = { selector = "article.listing", id_attr = "data-id" }
TOML
notifio check --json --config "$work/notifio.toml" >"$work/check.json"
head -c 300 "$work/check.json"; echo " …"
grep -q '"outcome":"ok"' "$work/check.json" || fail "check did not read the portal"
grep -q '"baseline":true' "$work/check.json" || fail "check's first look was not a baseline"

for file in /usr/share/man/man1/notifio.1.gz /usr/share/man/man1/notifio-watch.1.gz \
    /usr/share/bash-completion/completions/notifio /usr/share/zsh/vendor-completions/_notifio \
    /usr/share/fish/vendor_completions.d/notifio.fish /usr/lib/systemd/user/notifio.service \
    /usr/share/doc/notifio/README.md /usr/share/doc/notifio/copyright; do
    [[ -s $file ]] || fail "the package did not install $file"
done
MANWIDTH=80 man -P cat notifio | grep -q "EXIT STATUS" || fail "man notifio does not show the page"
grep -qx 'ExecStart="/usr/bin/notifio" "watch"' /usr/lib/systemd/user/notifio.service \
    || fail "the user unit does not run /usr/bin/notifio watch"
if command -v systemd-analyze >/dev/null; then
    XDG_RUNTIME_DIR=$work systemd-analyze --user verify /usr/lib/systemd/user/notifio.service
fi
bash -c 'source /usr/share/bash-completion/completions/notifio && complete -p notifio' >/dev/null \
    || fail "bash does not load the installed completions"
echo "deb-test: the installed package works"
