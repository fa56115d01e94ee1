#!/usr/bin/env bash
# scripts/install_football.sh -- the `football` extra's install step: Google Research Football (gfootball 2.10.2)
# into the active Python environment, for sfx's football_ env family (sfx/envs/football).
#
# gfootball on PyPI is a source distribution whose setup.py compiles a C++ engine with cmake. Left to itself it
# picks its make parallelism with a `python3 -c 'import psutil ...'` that fails inside pip's isolated build
# environment (no psutil there), which turns into an unbounded `make -j`. So this script:
#   1. apt-get installs the Debian build dependencies (root on Debian/Ubuntu; otherwise it says which are needed),
#   2. compiles the engine itself from the sdist with cmake + make -j$SFX_FOOTBALL_JOBS (default 2) under nice,
#      without debug info (upstream adds -g to -O3: the same code, a much slower build), cached in
#      $SFX_FOOTBALL_BUILD_DIR (default ~/.cache/sfx/football) so a second run does not rebuild,
#   3. pip installs the sdist with GFOOTBALL_USE_PREBUILT_SO=1 (gfootball's own switch) pointing at that library,
#      and gfootball's runtime requirements except opencv-python: sfx's other families use
#      opencv-python-headless, and the two wheels overwrite each other's cv2 (gfootball only imports cv2).
# Idempotent: it does nothing when `import gfootball_engine` already loads the engine.
# Measured: the engine compiled in 24 min on 2 cores shared with other jobs (docs/environments/football.md).
set -uo pipefail

VERSION="${SFX_FOOTBALL_VERSION:-2.10.2}"
JOBS="${SFX_FOOTBALL_JOBS:-2}"
BUILD_DIR="${SFX_FOOTBALL_BUILD_DIR:-$HOME/.cache/sfx/football}"
PYTHON="${PYTHON:-python}"
say() { echo "[install_football] $*" >&2; }
fail() {
    say "FAILED: $1"
    if [ -n "${2:-}" ] && [ -f "$2" ]; then
        say "decisive lines of $2:"
        grep -n -i -E "error|fatal|not found|could not|undefined reference|No such file" "$2" | head -25 >&2
        say "last lines of $2:"
        tail -15 "$2" >&2
    fi
    exit 1
}

if "$PYTHON" -c "import gfootball_engine, gfootball.env" >/dev/null 2>&1; then
    say "gfootball is already installed: $("$PYTHON" -c 'import importlib.metadata as m; print(m.version("gfootball"))')"
    exit 0
fi

DEB_PACKAGES=(cmake build-essential pkg-config libgl1-mesa-dev libegl1-mesa-dev libgles2-mesa-dev
              libsdl2-dev libsdl2-image-dev libsdl2-ttf-dev libsdl2-gfx-dev
              libboost-python-dev libboost-thread-dev libboost-system-dev libboost-filesystem-dev
              libosmesa6 libgl1-mesa-dri xvfb)
missing=()
for p in "${DEB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        fail "missing build dependencies (install them as root, then rerun): ${missing[*]}"
    fi
    say "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    mkdir -p "$BUILD_DIR"
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
        >"$BUILD_DIR/apt.log" 2>&1 || fail "apt-get install" "$BUILD_DIR/apt.log"
fi

mkdir -p "$BUILD_DIR"
SRC="$BUILD_DIR/gfootball-$VERSION"
if [ ! -d "$SRC" ]; then
    say "downloading the gfootball $VERSION sdist"
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "gfootball==$VERSION" -d "$BUILD_DIR" \
        >"$BUILD_DIR/download.log" 2>&1 || fail "pip download gfootball==$VERSION" "$BUILD_DIR/download.log"
    tar -xzf "$BUILD_DIR/gfootball-$VERSION.tar.gz" -C "$BUILD_DIR" || fail "unpacking the sdist"
fi

ENGINE="$SRC/third_party/gfootball_engine"
LIB="$ENGINE/lib/prebuilt_gameplayfootball.so"
if [ ! -f "$LIB" ]; then
    PY_INCLUDE="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
    PY_EXE="$("$PYTHON" -c 'import sys; print(sys.executable)')"
    say "compiling the engine (make -j$JOBS, nice); log: $BUILD_DIR/build.log"
    start=$(date +%s)
    (
        cd "$ENGINE" && rm -f CMakeCache.txt &&
        nice -n 10 cmake . -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-g0 -DCMAKE_C_FLAGS_RELEASE=-g0 \
            -DPython_EXECUTABLE="$PY_EXE" -DPython_INCLUDE_DIR="$PY_INCLUDE" &&
        nice -n 10 make -j"$JOBS"
    ) >"$BUILD_DIR/build.log" 2>&1 || fail "compiling the engine" "$BUILD_DIR/build.log"
    mkdir -p "$ENGINE/lib" && cp "$ENGINE/libgame.so" "$LIB" || fail "no libgame.so after the build" "$BUILD_DIR/build.log"
    say "engine compiled in $(( ($(date +%s) - start) / 60 )) min"
fi

say "pip install gfootball $VERSION (prebuilt engine) and its runtime requirements"
(
    "$PYTHON" -m pip install "pygame-ce>=2.4.0" psutil scipy "gym>=0.22,<0.26" absl-py six wheel opencv-python-headless &&
    cd "$SRC" && GFOOTBALL_USE_PREBUILT_SO=1 "$PYTHON" -m pip install --no-deps --no-build-isolation .
) >"$BUILD_DIR/pip.log" 2>&1 || fail "pip install" "$BUILD_DIR/pip.log"

cd /tmp && "$PYTHON" -c "import gfootball_engine, gfootball.env" >"$BUILD_DIR/check.log" 2>&1 ||
    fail "the installed engine does not import" "$BUILD_DIR/check.log"
say "gfootball $VERSION installed"
