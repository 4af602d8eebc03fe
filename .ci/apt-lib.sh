# Shared by the .ci/install-*.sh scripts (sourced, not run): a root check and a quiet runner for apt-get.
# `quietly CMD...` runs a command and prints its output only if it fails (then exits with its name).
# `has_library NAME` asks the dynamic linker's cache for a library.
#
# The scripts run under `set -o pipefail`: never pipe into `grep -q` (or `head`) there.  grep -q exits at the first
# match, the writer then dies of SIGPIPE (status 141) and pipefail makes the whole pipe fail: an intermittent
# `Error 141` that depends on how the pipe's buffers happen to fill.  Capture the output first, then match it.

require_root() {  # require_root SCRIPT_NAME
    if [ "$(id -u)" -ne 0 ]; then
        echo "$1: run as root (it calls apt-get)" >&2
        exit 1
    fi
}

export DEBIAN_FRONTEND=noninteractive
_quiet_log="$(mktemp)"
trap 'rm -f "$_quiet_log"' EXIT

quietly() {
    if ! "$@" >"$_quiet_log" 2>&1; then
        cat "$_quiet_log" >&2
        echo "$(basename "$0"): failed: $*" >&2
        exit 1
    fi
}

has_library() {  # has_library 'libclblast.so.1'
    local cache
    cache="$(ldconfig -p)"
    [[ "$cache" == *"$1 "* ]]
}
