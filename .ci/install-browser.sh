#!/bin/sh
# Installs the headless browser the dashboard's browser test drives (tests/it/browser.rs):
# Debian's chromium and its matching chromedriver. Needs root (CI images run as root).
set -eu
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    echo "chromium and chromedriver already installed"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends chromium chromium-driver
chromium --version
chromedriver --version
