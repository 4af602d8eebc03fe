#!/usr/bin/env bash
# Install Debian's PostgreSQL server binaries (initdb, pg_ctl) as root, for the test that starts its own
# server in a temporary directory (tests/test_tune_workers.py: two `xegemm tune` workers sharing a study).
# Idempotent and quiet (apt output is shown only if a step fails); nothing is started here.
set -euo pipefail

. "$(dirname "$0")/apt-lib.sh"
require_root install-postgresql.sh

if command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    exit 0
fi

quietly apt-get update -qq
# the server package only: Debian's postgresql-common creates (and starts) a main cluster; stop it, the test
# starts its own server
quietly apt-get install -y -qq --no-install-recommends postgresql
service postgresql stop >/dev/null 2>&1 || true
