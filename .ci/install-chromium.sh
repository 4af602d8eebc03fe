#!/usr/bin/env bash
# Install Debian's Chromium and its WebDriver (chromium-driver), as root, for the report tests that open
# report.html in a headless browser.  Browsers cannot be downloaded from anywhere but Debian's archive here,
# so the tests drive this system Chromium.  Idempotent and quiet (apt output is shown only if a step fails);
# a second run only checks.
set -euo pipefail

. "$(dirname "$0")/apt-lib.sh"
require_root install-chromium.sh

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    # A fresh container has empty package lists: update, then install.
    quietly apt-get update -qq
    quietly apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core
fi

command -v chromium >/dev/null && command -v chromedriver >/dev/null
