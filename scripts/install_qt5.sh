#!/usr/bin/env bash
# scripts/install_qt5.sh -- the system Qt 5 runtime (libQt5Core, libQt5Gui) that EnvPool's Procgen links against
# (the procgen_ family, sfx.envs.procgen): installed once with apt-get (Debian's libqt5gui5, which pulls
# libqt5core5a) when we are root on Debian/Ubuntu and it is missing; otherwise it says why not, and procgen_ envs
# are a one-line error naming this script (their tests skip with that reason). scripts/setup_venv.sh calls it, so
# ./all_tests.sh and ./run_main.sh provide it. SFX_QT5=0 leaves the system alone.
set -uo pipefail
say() { echo "[install_qt5] $*" >&2; }
if [ "${SFX_QT5:-1}" = 0 ]; then
    exit 0
fi
if /sbin/ldconfig -p 2>/dev/null | grep -q 'libQt5Gui\.so\.5'; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || [ ! -f /etc/debian_version ]; then
    say "the Qt 5 runtime (libQt5Gui) is missing and this is not root on Debian/Ubuntu: procgen_ envs (EnvPool's" \
        "Procgen) will not load; install your system's Qt 5 base libraries (e.g. apt-get install libqt5gui5)"
    exit 0
fi
say "installing the Qt 5 runtime for EnvPool's Procgen (apt-get install libqt5gui5, once)"
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get install -y -qq --no-install-recommends libqt5gui5 >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq --no-install-recommends libqt5gui5 >/dev/null; }; }; then
    say "apt-get install libqt5gui5 failed: procgen_ envs will not load (their tests skip, saying why)"
fi
exit 0
