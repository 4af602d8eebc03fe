#!/usr/bin/env bash
# Install Debian's Chromium and its WebDriver (chromium-driver), as root, for the report tests that open
# report.html in a headless browser.  Browsers cannot be downloaded from anywhere but Debian's archive here,
# so the tests drive this system Chromium.  Idempotent and quiet (apt output is shown only if a step fails);
# a second run only checks.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
    echo "install-chromium.sh: run as root (it calls apt-get)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

quietly() {  # run a command, print its output only if it fails
    if ! "$@" >"$log" 2>&1; then
        cat "$log" >&2
        echo "install-chromium.sh: failed: $*" >&2
        exit 1
    fi
}

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    # A fresh container has empty package lists: update, then install.
    quietly apt-get update -qq
    quietly apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core
fi

command -v chromium >/dev/null && command -v chromedriver >/dev/null
