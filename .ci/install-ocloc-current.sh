#!/usr/bin/env bash
# Install a CURRENT Intel GPU compiler (Debian unstable's ocloc 26.x with IGC 2.x) into a folder of the project,
# beside Debian 12's old one (install-ocloc.sh), without touching the system.  As root (apt-get needs it).
#
#   .ci/install-ocloc-current.sh            # install once; a second run only checks (quiet)
#   XEGEMM_TOOLS_DIR=/some/dir ...           # where (default: <repo>/.tools, gitignored)
#   XEGEMM_OCLOC_CURRENT_REFRESH=1 ...       # replace an installed one with what unstable offers today
#   XEGEMM_OCLOC_CURRENT_SUITE=no-such ...   # the suite to take it from (default sid); a wrong one shows the
#                                            # failure path: one line, nothing installed, exit 0
#
# Result: $XEGEMM_TOOLS_DIR/ocloc-current/root (the unpacked packages), .../versions.txt (package versions and
# `ocloc --version`), and the wrapper $XEGEMM_TOOLS_DIR/bin/ocloc-current, which runs unstable's ocloc through
# unstable's own loader (ld-linux-x86-64.so.2 --library-path ...) with all its arguments.
#
# Why this way (docs/compilers.md, "The current compiler"): unstable's intel-ocloc, libigc2, libigdfcl2 and
# libigdgmm12 need a newer glibc and libstdc++ than Debian 12's.  Installing them system-wide would replace the
# system's libc, so they are only downloaded (`apt-get download`, through a sources list and apt state of this
# script's own: the system's apt lists, cache and status are never read or written) and unpacked with
# `dpkg -x`, together with unstable's libc6, libstdc++6, libgcc-s1 and zlib1g.  Unstable changes daily, and the
# network may be down: any failure prints one line, leaves what was there before, and exits 0, so that
# `make test` carries on with the old compiler.
set -euo pipefail

. "$(dirname "$0")/apt-lib.sh"
require_root install-ocloc-current.sh

repo="$(cd "$(dirname "$0")/.." && pwd)"
tools="${XEGEMM_TOOLS_DIR:-$repo/.tools}"
suite="${XEGEMM_OCLOC_CURRENT_SUITE:-sid}"
dest="$tools/ocloc-current"
wrapper="$tools/bin/ocloc-current"
packages=(intel-ocloc libigc2 libigdfcl2 libigdgmm12 libc6 libstdc++6 libgcc-s1 zlib1g)

note() { echo "install-ocloc-current.sh: $*" >&2; }

# Installed and working: nothing to do (quiet).
if [ -z "${XEGEMM_OCLOC_CURRENT_REFRESH:-}" ] && [ -x "$wrapper" ] && [ -f "$dest/versions.txt" ] \
        && "$wrapper" --version >/dev/null 2>&1; then
    exit 0
fi

if [ "$(dpkg --print-architecture)" != amd64 ]; then
    note "only amd64 is handled (unstable's x86-64 loader); the current compiler is not installed"
    exit 0
fi

# Debian's mirror, as the system's own sources name it (deb822 .sources files or a one-line sources.list).
mirror=""
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    while IFS= read -r line; do
        set -f   # the words of a sources line are not file patterns
        for word in $line; do
            case "$word" in
                http://*/debian|https://*/debian|http://*/debian/|https://*/debian/) mirror="${word%/}"; break 3 ;;
            esac
        done
        set +f
    done <"$f"
done
set +f
if [ -z "$mirror" ]; then
    note "no Debian mirror found in /etc/apt; the current compiler is not installed (the old one stays in use)"
    exit 0
fi

mkdir -p "$tools"
stage="$(mktemp -d "$tools/.ocloc-current-stage.XXXXXX")"
cleanup() { rm -rf "$stage"; rm -f "$_quiet_log"; }
trap cleanup EXIT

# Every step below either succeeds or makes the script give up cleanly (`fail`), never exit non-zero.
log="$stage/log"
fail() {
    local kept="the current compiler is not installed (the old one stays in use"
    if [ -x "$wrapper" ] && [ -d "$dest" ]; then kept="the installed one in $dest stays (unchanged"; fi
    note "$1; $kept; details: rerun with XEGEMM_OCLOC_CURRENT_VERBOSE=1)"
    if [ -n "${XEGEMM_OCLOC_CURRENT_VERBOSE:-}" ] && [ -f "$log" ]; then cat "$log" >&2; fi
    exit 0
}
trap 'fail "an unexpected error (line $LINENO)"' ERR
step() {  # step WHAT CMD...: run CMD, output to the log; on failure give up with WHAT
    local what="$1"; shift
    "$@" >>"$log" 2>&1 || fail "$what failed"
}

apt_dir="$stage/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$stage/debs" "$stage/root"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" >"$apt_dir/sources.list"
apt_private=(
    -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o Dir::State::Status=/dev/null
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
    -o APT::Sandbox::User=root -o Acquire::Languages=none -o APT::Architectures::=amd64
)
step "apt-get update of $suite from $mirror" apt-get "${apt_private[@]}" -qq update
# `apt-get update` reports a suite without a Release file as a warning only: check that lists arrived.
lists=("$apt_dir"/lists/*_Packages*)
[ -e "${lists[0]}" ] || fail "no package list for $suite at $mirror"
cd "$stage/debs"   # apt-get download writes into the working directory
step "apt-get download of ${packages[*]}" apt-get "${apt_private[@]}" -qq download "${packages[@]}"
cd "$repo"

: >"$stage/versions.txt"
for deb in "$stage"/debs/*.deb; do
    step "dpkg -x $(basename "$deb")" dpkg-deb -x "$deb" "$stage/root"
    echo "$(dpkg-deb -f "$deb" Package)=$(dpkg-deb -f "$deb" Version)" >>"$stage/versions.txt"
done

lib="$stage/root/usr/lib/x86_64-linux-gnu"
ocloc_bins=("$stage"/root/usr/bin/ocloc-*)
[ -x "${ocloc_bins[0]}" ] || fail "intel-ocloc held no /usr/bin/ocloc-*"
[ -x "$lib/ld-linux-x86-64.so.2" ] || fail "libc6 held no $lib/ld-linux-x86-64.so.2"
iga=("$lib"/libiga64.so.*)
[ -e "${iga[0]}" ] || fail "libigc2 held no libiga64.so.*"
# `ocloc disasm` opens libiga64.so; the package ships only the versioned name.
ln -sfn "$(basename "${iga[0]}")" "$lib/libiga64.so"

write_wrapper() {  # write_wrapper ROOT FILE: a wrapper running ROOT's ocloc through ROOT's loader
    local root="$1" ocloc_name
    ocloc_name="$(basename "${ocloc_bins[0]}")"
    cat >"$2" <<EOF
#!/bin/sh
# Written by .ci/install-ocloc-current.sh: Debian unstable's ocloc, run through unstable's own loader and
# libraries (they need a newer glibc than the system's); every argument goes to ocloc.
lib='$root/usr/lib/x86_64-linux-gnu'
exec "\$lib/ld-linux-x86-64.so.2" --library-path "\$lib" '$root/usr/bin/$ocloc_name' "\$@"
EOF
    chmod 755 "$2"
}

# Try it where it was unpacked before putting it in place.
write_wrapper "$stage/root" "$stage/ocloc-try"
version="$("$stage/ocloc-try" --version 2>>"$log")" || fail "the unpacked ocloc does not run"
echo "ocloc-version=$(echo "$version" | tr '\n' ' ' | sed 's/ *$//')" >>"$stage/versions.txt"
rm -f "$stage/ocloc-try"

# Put it in place: the new folder replaces the old one by two renames; the wrapper is written beside it and
# renamed over the old one.
mkdir -p "$tools/bin"
mkdir "$stage/final"
mv "$stage/root" "$stage/final/root"
mv "$stage/versions.txt" "$stage/final/versions.txt"
if [ -e "$dest" ]; then mv "$dest" "$stage/old"; fi
if ! mv "$stage/final" "$dest"; then
    if [ -e "$stage/old" ]; then mv "$stage/old" "$dest"; fi
    fail "moving the new compiler to $dest failed"
fi
write_wrapper "$dest/root" "$stage/wrapper"
mv "$stage/wrapper" "$wrapper"
"$wrapper" --version >/dev/null 2>&1 || { note "the installed wrapper $wrapper does not run"; exit 0; }
echo "install-ocloc-current.sh: installed $(grep '^intel-ocloc=' "$dest/versions.txt") in $dest ($wrapper)"
