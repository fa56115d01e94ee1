"""What a run was: the code (git commit, uncommitted changes), the packages, the machine, and the random
state a checkpoint continues from. Written into cfg.json (``provenance``) and into checkpoints (``rng``)."""

from __future__ import annotations

import platform
import random
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

# distributions whose versions change results: the trainer's, and every env family's optional package
PACKAGES = ("sfx", "torch", "numpy", "gymnasium", "vizdoom", "ale-py", "mujoco", "minigrid", "pettingzoo",
            "opencv-python-headless")


def git_state(folder: str | Path) -> dict | None:
    """``{"commit", "dirty"}`` of the git checkout holding ``folder`` (``dirty``: tracked files changed since
    the commit); None when it is not in a git checkout or git is missing."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": dirty}


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Installed version of each distribution in ``names`` (the missing ones are left out)."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def provenance() -> dict:
    """The provenance of a run started now, from this process (see the module docstring)."""
    info: dict[str, Any] = {
        "git": git_state(Path(__file__).resolve().parents[1]),  # sfx's own folder
        "packages": package_versions(),
        "python": platform.python_version(),
        "host": platform.node(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }
    torch = sys.modules.get("torch")
    if torch is not None:  # the CUDA torch was built with (asking the driver would initialise CUDA here)
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return info


def new_seed() -> int:
    """A seed for a run started without ``--seed`` (written back into its cfg so the run can be repeated)."""
    return random.SystemRandom().randrange(2**31 - 1)


def rng_state() -> dict:
    """This process's torch, numpy and Python random states (a checkpoint's ``rng``)."""
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch_cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict | None) -> None:
    """Set this process's random states to a checkpoint's ``rng`` (nothing when the checkpoint has none)."""
    if not state:
        return
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"].cpu())
    if "torch_cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["torch_cuda"]])
