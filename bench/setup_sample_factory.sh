#!/usr/bin/env bash
# Create bench/sf_venv: Sample Factory 2.1.1 with its doom and Atari examples, for the side-by-side figures
# of bench/throughput.py and bench/learning.py. Its own venv because it pins numpy<2 and gymnasium<1.0,
# which sfx does not.
#
# Atari: SF's [atari] extra (gymnasium[atari,accept-rom-license] -> ale-py 0.8 + AutoROM) fetches the ROMs
# from outside the package registry at install time. ale-py 0.9.0 bundles the ROMs and still runs on
# gymnasium 0.29, but registers its ids (BreakoutNoFrameskip-v4, ...) only when ale_py is imported, which
# SF's sf_examples.atari never does. So a tiny plugin package (sf-ale-registration, written below)
# hooks `import ale_py` into gymnasium's own plugin entry point ("gymnasium.envs", the one shimmy uses).
#
#   bash bench/setup_sample_factory.sh            # or SF_VENV=/elsewhere PYTHON=python3.11 ...
#
# Torch: the CPU build that sfx's venv uses (SF 2.1.1 accepts any torch >=1.9,<3.0 but 1.13.0).
# On a machine whose default index serves only CUDA builds, set SF_TORCH_INDEX to a CPU wheel index.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${SF_VENV:-$here/sf_venv}"
python="${PYTHON:-python3}"
torch_req="${SF_TORCH:-torch==2.13.0}"

pip=("$venv/bin/pip" install --no-input)
if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "import sample_factory, sf_examples.vizdoom, vizdoom, torch" 2>/dev/null; then
    echo "$venv already has Sample Factory $("$venv/bin/python" -c 'from importlib.metadata import version; print(version("sample-factory"))')"
else
    "$python" -m venv "$venv"
    if [[ -n "${SF_TORCH_INDEX:-}" ]]; then
        "${pip[@]}" --index-url "$SF_TORCH_INDEX" "$torch_req"
    else
        "${pip[@]}" "$torch_req"
    fi
    # numpy<2: SF 2.1.1 pins it; vizdoom<2.0: the range SF's [vizdoom] extra asks for
    "${pip[@]}" "sample-factory[vizdoom]==2.1.1" "$torch_req" "numpy<2" "vizdoom<2.0"
fi

# Atari for sf_examples.atari (see the top): ale-py with bundled ROMs + the registration plugin
if ! "$venv/bin/python" -c "import gymnasium; gymnasium.spec('BreakoutNoFrameskip-v4')" 2>/dev/null; then
    plugin="$(mktemp -d)"
    trap 'rm -rf "$plugin"' EXIT
    cat >"$plugin/pyproject.toml" <<'TOML'
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "sf-ale-registration"
version = "1.0"
description = "Registers ale-py's Atari env ids in gymnasium 0.29 on import gymnasium (for Sample Factory 2.1.1's Atari example)"
dependencies = ["ale-py==0.9.0"]

[project.entry-points."gymnasium.envs"]
__root__ = "sf_ale_registration:register"

[tool.setuptools]
py-modules = ["sf_ale_registration"]
TOML
    cat >"$plugin/sf_ale_registration.py" <<'PYMOD'
"""gymnasium plugin: ale-py 0.9 registers its Atari ids (BreakoutNoFrameskip-v4, ALE/Breakout-v5, ...) on import."""


import sys


def register() -> None:
    """Called by gymnasium 0.29 on ``import gymnasium`` (entry point group ``gymnasium.envs``)."""
    from gymnasium.envs.registration import register as gym_register

    # Plugins run while gymnasium/__init__ is still importing gymnasium.envs, before it binds
    # gymnasium.register (the same function), which ale_py's registration calls.
    gymnasium = sys.modules["gymnasium"]
    if not hasattr(gymnasium, "register"):
        gymnasium.register = gym_register
    import ale_py  # noqa: F401
PYMOD
    "${pip[@]}" "ale-py==0.9.0" "numpy<2" "$plugin"
fi

"$venv/bin/python" - <<'PY'
from importlib.metadata import version
import numpy, torch, gymnasium, vizdoom, sample_factory, sf_examples.vizdoom.train_vizdoom, sf_examples.atari.train_atari
gymnasium.spec("BreakoutNoFrameskip-v4")
print(f"Sample Factory {version('sample-factory')}, torch {torch.__version__}, numpy {numpy.__version__}, "
      f"gymnasium {gymnasium.__version__}, vizdoom {vizdoom.__version__}, ale-py {version('ale-py')}")
PY
