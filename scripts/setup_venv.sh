#!/usr/bin/env bash
# Create (if missing) and update the project's virtual environment; shared by all_tests.sh and
# run_main.sh so that the test command and the main job install exactly the same things.
#
#   SFX_VENV        where the venv lives                     (default: .venv in the repo root)
#   SFX_PYTHON      interpreter that creates it (>= 3.10)    (default: python3)
#   SFX_TORCH_SPEC  pip arguments that install torch when torch is not importable yet
#                   (default: torch==2.13.0, the CPU build this machine's package index serves;
#                   on a GPU machine pass the CUDA build you want, e.g. "torch==2.5.1")
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${SFX_VENV:-.venv}"
PYTHON="${SFX_PYTHON:-python3}"
TORCH_SPEC="${SFX_TORCH_SPEC:-torch==2.13.0}"

if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
        echo "setup_venv: error: sfx needs Python >= 3.10; '$PYTHON' is $("$PYTHON" --version 2>&1 || echo missing)." \
             "Set SFX_PYTHON to a newer interpreter." >&2
        exit 1
    fi
    echo "setup_venv: creating $VENV with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"

# torch first and on its own: which build (CPU / CUDA) is the machine's choice, not setup.py's
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    echo "setup_venv: installing $TORCH_SPEC"
    # shellcheck disable=SC2086  # word splitting wanted: the spec may carry extra pip options
    if ! "$PY" -m pip install -q $TORCH_SPEC; then
        echo "setup_venv: error: 'pip install $TORCH_SPEC' failed. Set SFX_TORCH_SPEC to a torch" \
             "requirement this machine's package index can serve." >&2
        exit 1
    fi
fi

# Reinstall sfx only when what the install depends on changed (setup.py, the top-level packages):
# an editable install otherwise costs several seconds of pip resolution on every test run.
stamp_file="$VENV/.sfx_install_stamp"
stamp="$( (cat setup.py; ls sfx*/__init__.py 2>/dev/null) | cksum)"
if [ "$(cat "$stamp_file" 2>/dev/null)" != "$stamp" ] \
        || ! "$PY" -c 'import sfx, pytest, pytest_timeout' >/dev/null 2>&1; then
    echo "setup_venv: installing sfx (pip install -e .[test])"
    # pip's build backend warns loudly about editable installs: keep its output for failures only
    pip_log="$(mktemp)"
    if ! "$PY" -m pip install -q -e ".[test]" >"$pip_log" 2>&1; then
        cat "$pip_log" >&2
        rm -f "$pip_log"
        echo "setup_venv: error: 'pip install -e .[test]' failed (output above)." >&2
        exit 1
    fi
    rm -f "$pip_log"
    echo "$stamp" > "$stamp_file"
fi

# pygame and pygame-ce install into one package folder (pygame/): gymnasium, vizdoom, minigrid and pettingzoo
# require pygame-ce, so a pygame left from an older install is removed, and pygame-ce, whose files that removal
# took, is reinstalled. One of them, pygame-ce, and every family renders.
if "$PY" -c 'import importlib.metadata as m; m.version("pygame")' >/dev/null 2>&1; then
    echo "setup_venv: replacing pygame with pygame-ce (the two share one package folder)"
    if ! { "$PY" -m pip uninstall -q -y pygame \
            && "$PY" -m pip install -q --force-reinstall --no-deps "pygame-ce>=2.4.0"; }; then
        echo "setup_venv: error: could not replace pygame by pygame-ce (pip output above)." >&2
        exit 1
    fi
fi

# the system Qt 5 runtime EnvPool's Procgen needs (procgen_ envs); says why not where it cannot install it
scripts/install_qt5.sh
