#!/usr/bin/env bash
# `apt-install.sh WHO PACKAGE...`: install Debian packages with apt-get (as root, or through
# sudo), for the scripts that say which packages a make target needs (WHO names that script in
# the messages). Exit 0 when installed; 1 with the reason on stderr.
set -uo pipefail

who=$1
shift
fail() {
    echo "$who: $*" >&2
    exit 1
}

command -v apt-get >/dev/null 2>&1 || fail "no apt-get here: install $* by hand"
if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    fail "not root and no sudo: run as root: apt-get install -y $*"
fi

echo "$who: installing $* with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! "${SUDO[@]}" apt-get update -q >"$log" 2>&1; then
    tail -n 5 "$log" >&2
    fail "apt-get update failed (no network to the Debian mirror?)"
fi
if ! "${SUDO[@]}" apt-get install -y -q --no-install-recommends "$@" >"$log" 2>&1; then
    tail -n 10 "$log" >&2
    fail "apt-get install $* failed (see above)"
fi
