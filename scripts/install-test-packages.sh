#!/usr/bin/env bash
# The Debian packages the tests use (`make test-packages`): headless Chromium and its
# WebDriver for the HTML report's browser tests and the docs screenshot, zsh for the
# completion test, gcc for the mypyc-compiled engine the suite also runs against.
# Idempotent: a machine that has them all is left alone. Exit 0 when all are there
# afterwards; otherwise 1, with the reason on stderr (those tests then skip on a developer's
# machine and fail in CI).
set -uo pipefail

PACKAGES=(chromium chromium-driver zsh gcc libc6-dev)

have_all() {
    command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 &&
        command -v zsh >/dev/null 2>&1 && command -v gcc >/dev/null 2>&1
}

fail() {
    echo "install-test-packages: $*" >&2
    exit 1
}

if have_all; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    fail "no apt-get here: install Chromium and chromedriver (${PACKAGES[*]} on Debian) by hand"
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    fail "not root and no sudo: run as root: apt-get install -y ${PACKAGES[*]}"
fi

echo "install-test-packages: installing ${PACKAGES[*]} with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! "${SUDO[@]}" apt-get update -q >"$log" 2>&1; then
    tail -n 5 "$log" >&2
    fail "apt-get update failed (no network to the Debian mirror?)"
fi
if ! "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >"$log" 2>&1; then
    tail -n 10 "$log" >&2
    fail "apt-get install ${PACKAGES[*]} failed (see above)"
fi
have_all || fail "apt-get installed ${PACKAGES[*]} but chromium, chromedriver, zsh or gcc is not on PATH"
echo "install-test-packages: $(chromium --version 2>/dev/null)" >&2
