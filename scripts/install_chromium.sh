#!/usr/bin/env bash
# scripts/install_chromium.sh -- Debian's chromium for the docs site's browser test (tests/test_docs.py, slow):
# installed once with apt-get when we are root on Debian/Ubuntu and it is missing; otherwise it says why not
# and the test skips with that reason. all_tests.sh calls it before the slow suite.
set -uo pipefail
say() { echo "[install_chromium] $*" >&2; }
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || [ ! -f /etc/debian_version ]; then
    say "chromium is not installed and this is not root on Debian/Ubuntu: the browser test of the docs skips"
    exit 0
fi
say "installing chromium (apt-get, once)"
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; then
    say "apt-get install chromium failed: the browser test of the docs skips"
fi
exit 0
