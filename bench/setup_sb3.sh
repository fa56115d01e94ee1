#!/usr/bin/env bash
# Create bench/sb3_venv: Stable-Baselines3 + the RL Zoo (rl_zoo3) + gymnasium with MuJoCo, the reference
# side of the R2D2-vs-DQN and SAC-vs-SAC figures (bench/sb3_baseline.py). A venv of its own: never a runtime
# dependency of sfx, and not in CI.
#
#   bash bench/setup_sb3.sh            # or SB3_VENV=/elsewhere PYTHON=python3.11 bash bench/setup_sb3.sh
#
#   SB3_VENV        where the venv lives                    (default: bench/sb3_venv)
#   PYTHON          interpreter that creates it             (default: python3)
#   SB3_TORCH_SPEC  pip arguments that install torch first  (default: torch==2.13.0, the CPU build this
#                   machine's package index serves; an unpinned torch pulls the CUDA wheels, GBs of them)
#   SB3_PACKAGES    pip arguments for the rest              (default: stable-baselines3 rl-zoo3 mujoco
#                   gymnasium, i.e. MuJoCo through the `mujoco` bindings as in sfx's own venv)
#
# Idempotent: when the venv already imports everything, it only prints the versions.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${SB3_VENV:-$here/sb3_venv}"
python="${PYTHON:-python3}"
torch_spec="${SB3_TORCH_SPEC:-torch==2.13.0}"
packages="${SB3_PACKAGES:-stable-baselines3 rl-zoo3 mujoco gymnasium}"

check='import torch, stable_baselines3, rl_zoo3, gymnasium, mujoco; gymnasium.make("HalfCheetah-v5").close()'

if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "$check" 2>/dev/null; then
    echo "setup_sb3: $venv is ready"
else
    if [[ ! -x "$venv/bin/python" ]]; then
        echo "setup_sb3: creating $venv with $("$python" --version 2>&1)"
        "$python" -m venv "$venv"
    fi
    pip=("$venv/bin/python" -m pip install --no-input -q)
    if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
        echo "setup_sb3: installing $torch_spec"
        # shellcheck disable=SC2086  # word splitting wanted: the spec may carry extra pip options
        "${pip[@]}" $torch_spec
    fi
    echo "setup_sb3: installing $packages"
    # torch stays as installed above: pip keeps a satisfying torch rather than pulling another build
    # shellcheck disable=SC2086
    "${pip[@]}" $packages
    "$venv/bin/python" -c "$check"
fi

"$venv/bin/python" - <<'PY'
from importlib.metadata import version
for name in ("stable-baselines3", "rl_zoo3", "torch", "gymnasium", "mujoco", "numpy"):
    print(f"  {name} {version(name)}")
PY
