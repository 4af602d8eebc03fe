# Sourced by the .ci/install-*.sh scripts: `quietly CMD...` runs a command and prints its output only if it
# fails (then exits 1, naming the calling script and the command).
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
quietly() {
    if ! "$@" >"$log" 2>&1; then
        cat "$log" >&2
        echo "$(basename "$0"): failed: $*" >&2
        exit 1
    fi
}
