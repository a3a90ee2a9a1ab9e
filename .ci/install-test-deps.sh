#!/bin/sh
# Installs what the tests start besides Notifio itself, from Debian's packages:
# - chromium: the browser fetch path (tests/it/browser_fetch.rs) and the dashboard's browser test (tests/it/browser.rs);
# - chromium-driver: the dashboard's browser test drives Chromium through WebDriver;
# - xvfb: `notifio login` opens a visible window, under a virtual display in tests;
# - dbus: the desktop notification channel's test runs a session bus of its own;
# - systemd: `notifio service`'s test checks the unit it writes with `systemd-analyze verify`;
# - man-db: the man pages `notifio man` generates are rendered by `man -l` (tests/it/install.rs),
#   and .ci/run reads the installed one with `man notifio`;
# - zsh, fish: each parses the completion script `notifio completions` prints for it (bash is
#   there already);
# - dpkg-dev: cargo-deb works out the package's `Depends` with its dpkg-shlibdeps (.ci/run).
# Needs root (CI images run as root).
set -eu
missing=""
for cmd in chromium:chromium chromedriver:chromium-driver Xvfb:xvfb dbus-daemon:dbus systemd-analyze:systemd man:man-db zsh:zsh fish:fish dpkg-shlibdeps:dpkg-dev; do
    command -v "${cmd%%:*}" >/dev/null 2>&1 || missing="$missing ${cmd#*:}"
done
if [ -z "$missing" ]; then
    echo "test dependencies already installed"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
# shellcheck disable=SC2086 # one word per package
apt-get install -y --no-install-recommends $missing
chromium --version
chromedriver --version
