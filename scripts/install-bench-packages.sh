#!/usr/bin/env bash
# The Debian package the load benchmark uses (`make bench`): wrk, an HTTP load client written
# in C, so the numbers bench/load.py prints are what a client independent of this project sees
# (bench/wrkclient.py). Idempotent. Without it, bench/load.py says so and uses its own client.
set -uo pipefail
command -v wrk >/dev/null 2>&1 && exit 0
bash "$(dirname "$0")/apt-install.sh" install-bench-packages wrk
