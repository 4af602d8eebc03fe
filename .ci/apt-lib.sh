# Shared by the .ci/install-*.sh scripts (sourced, not run): a root check and a quiet runner for apt-get.
# `quietly CMD...` runs a command and prints its output only if it fails (then exits with its name).

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
