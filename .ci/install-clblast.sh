#!/usr/bin/env bash
# Install Debian's CLBlast (libclblast1) and its tuners (clblast-utils), as root, for the CLBlast reference test
# of `make test` and the goals benchmark (`make bench-goals`): CLBlast's SGEMM is one of its references,
# tuned for the machine with clblast_tuner_xgemm.  Idempotent and quiet (apt output is shown only if a step fails); a second run only checks.
set -euo pipefail

. "$(dirname "$0")/apt-lib.sh"
require_root install-clblast.sh

if ! has_library libclblast.so.1 || ! command -v clblast_tuner_xgemm >/dev/null 2>&1; then
    quietly apt-get update -qq
    quietly apt-get install -y -qq --no-install-recommends libclblast1 clblast-utils
fi

has_library libclblast.so.1 && command -v clblast_tuner_xgemm >/dev/null
