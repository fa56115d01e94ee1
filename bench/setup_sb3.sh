#!/usr/bin/env bash
# Create bench/sb3_venv: Stable-Baselines3 + the RL Zoo (rl_zoo3) + gymnasium with MuJoCo and Atari, the
# reference side of the R2D2-vs-DQN, SAC-vs-SAC, PPO HalfCheetah and Atari (issue 54) figures
# (bench/sb3_baseline.py). A venv of its own: never a runtime dependency of sfx, and not in CI.
#
#   bash bench/setup_sb3.sh            # or SB3_VENV=/elsewhere PYTHON=python3.11 bash bench/setup_sb3.sh
#
#   SB3_VENV        where the venv lives                    (default: bench/sb3_venv)
#   PYTHON          interpreter that creates it             (default: python3)
#   SB3_TORCH_SPEC  pip arguments that install torch first  (default: torch==2.13.0, the CPU build this
#                   machine's package index serves; an unpinned torch pulls the CUDA wheels, GBs of them)
#   SB3_PACKAGES    pip arguments for the rest              (default: stable-baselines3 rl-zoo3 mujoco
#                   gymnasium ale-py opencv-python-headless: MuJoCo through the `mujoco` bindings as in sfx's
#                   own venv; Atari through ale-py, which bundles the ROMs and registers gymnasium's
#                   `*NoFrameskip-v4` / `ALE/*-v5` ids; OpenCV for SB3's AtariWrapper (WarpFrame resizes
#                   with cv2), the headless build: SB3's `[extra]` would pull opencv-python and its GUI libs)
#
# Idempotent: when the venv already imports everything, it only prints the versions.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${SB3_VENV:-$here/sb3_venv}"
python="${PYTHON:-python3}"
torch_spec="${SB3_TORCH_SPEC:-torch==2.13.0}"
packages="${SB3_PACKAGES:-stable-baselines3 rl-zoo3 mujoco gymnasium ale-py opencv-python-headless}"

# ready = every import works and both families' envs build (ale-py's ids need gymnasium.register_envs)
check='import torch, stable_baselines3, rl_zoo3, gymnasium, mujoco, ale_py, cv2
gymnasium.register_envs(ale_py)
gymnasium.make("HalfCheetah-v5").close()
gymnasium.make("PongNoFrameskip-v4").close()
from stable_baselines3.common.atari_wrappers import AtariWrapper
AtariWrapper(gymnasium.make("BreakoutNoFrameskip-v4")).close()'

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
for name in ("stable-baselines3", "rl_zoo3", "torch", "gymnasium", "mujoco", "ale-py", "opencv-python-headless", "numpy"):
    print(f"  {name} {version(name)}")
PY
