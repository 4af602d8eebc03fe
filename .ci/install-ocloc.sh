#!/usr/bin/env bash
# Install Intel's offline compiler (ocloc) and the IGA disassembler library on Debian 12, as root.
# Idempotent and quiet (apt output is shown only if a step fails); a second run only checks, in ~20 ms.
# Source: docs/compilers.md ("ocloc"): Debian's intel-opencl-icd ships /usr/bin/ocloc (compute
# runtime 22.43, IGC 1.0.12504); `ocloc disasm` loads libiga64.so, but libigc1 ships only libiga64.so.1,
# so the link libiga64.so -> libiga64.so.1 is added next to it.
set -euo pipefail

. "$(dirname "$0")/apt-lib.sh"
require_root install-ocloc.sh

if ! command -v ocloc >/dev/null 2>&1; then
    # A fresh container has empty package lists: update, then install.
    quietly apt-get update -qq
    quietly apt-get install -y -qq --no-install-recommends intel-opencl-icd
fi

# libiga64.so -> libiga64.so.1, in the folder where the package put libiga64.so.1 (dpkg knows).
files="$(dpkg -L libigc1 2>/dev/null || true)"
iga=""
while IFS= read -r file; do
    if [[ "$file" == */libiga64.so.1 ]]; then iga="$file"; break; fi
done <<<"$files"
if [ -z "$iga" ]; then
    echo "install-ocloc.sh: libiga64.so.1 not found (is libigc1 installed?)" >&2
    exit 1
fi
link="$(dirname "$iga")/libiga64.so"
if [ ! -e "$link" ]; then
    ln -s libiga64.so.1 "$link"
fi

command -v ocloc >/dev/null
