#!/usr/bin/env bash
# The Debian packages the tests use (`make test-packages`): headless Chromium and its
# WebDriver for the HTML report's browser tests and the docs screenshot, zsh for the
# completion test, gcc for the mypyc-compiled engine the suite also runs against; and
# kubectl, which renders the kustomizations the manifest tests validate.
# Idempotent: a machine that has them all is left alone. Exit 0 when all are there
# afterwards; otherwise 1, with the reason on stderr (those tests then skip on a developer's
# machine and fail in CI).
#
# kubectl is no Debian package of a usable age (bookworm's kubernetes-client is 1.20, whose
# kustomize predates the overlays' syntax): it is the one the end-to-end control plane builds
# from the pinned Go modules (tests/e2e/binaries.py, the newest pinned release, which `make e2e`
# builds anyway), or else one on PATH.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

PACKAGES=(chromium chromium-driver zsh gcc libc6-dev)

have_all() {
    command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 &&
        command -v zsh >/dev/null 2>&1 && command -v gcc >/dev/null 2>&1
}

fail() {
    echo "install-test-packages: $*" >&2
    exit 1
}

kubectl_ready() {
    local newest
    newest=$("$PYTHON" tests/e2e/binaries.py versions | awk '{print $NF}') || return 1
    [ -x "$("$PYTHON" tests/e2e/binaries.py paths "$newest")/kubectl" ] ||
        command -v kubectl >/dev/null 2>&1
}

install_kubectl() {
    kubectl_ready && return 0
    command -v go >/dev/null 2>&1 ||
        fail "no kubectl: install Go and run make test-packages (it builds the pinned kubectl)"
    local newest
    newest=$("$PYTHON" tests/e2e/binaries.py versions | awk '{print $NF}')
    echo "install-test-packages: building kubectl (control plane $newest, pinned Go modules)" >&2
    "$PYTHON" tests/e2e/binaries.py build "$newest" || fail "the control plane build failed"
    kubectl_ready || fail "built the control plane $newest but its kubectl is missing"
}

if have_all; then
    install_kubectl
    exit 0
fi

bash scripts/apt-install.sh install-test-packages "${PACKAGES[@]}" || exit 1
have_all || fail "apt-get installed ${PACKAGES[*]} but chromium, chromedriver, zsh or gcc is not on PATH"
echo "install-test-packages: $(chromium --version 2>/dev/null)" >&2
install_kubectl
