"""Packaging for sfx: ``pip install -e .`` (add ``[test]`` for the test tools).

torch is left unpinned on purpose: pick the build (CPU or a CUDA flavour) that fits the machine
before installing sfx, e.g. ``SFX_TORCH_SPEC=... ./all_tests.sh`` or a plain ``pip install torch``.
"""

from pathlib import Path

from setuptools import find_packages, setup


def read_version() -> str:
    # parsed, not imported: importing sfx would need its dependencies before they are installed
    for line in (Path(__file__).parent / "sfx" / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise RuntimeError("sfx/__init__.py defines no __version__")


setup(
    name="sfx",
    version=read_version(),
    description="Fast asynchronous APPO / V-trace reinforcement learning on one machine",
    long_description=(Path(__file__).parent / "README.md").read_text(encoding="utf-8")
    if (Path(__file__).parent / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["sfx*"]),  # sfx and sfx_* (runner, tb, examples)
    package_data={"sfx_examples": ["doom_scenarios/*.cfg"]},
    python_requires=">=3.10",
    install_requires=[
        "torch>=2.1",
        "numpy",
        "gymnasium>=1.0",
        "tensorboard",
        "faster-fifo",
        "psutil",
        "imageio",
        "imageio-ffmpeg",
        "submitit",      # sfx_runner's Slurm backend
        "pandas",        # sfx_tb's tables and curves
        "matplotlib",    # sfx_tb's plots, bench charts
        "pillow",        # evaluation videos (animated GIFs in TensorBoard); matplotlib needs it too
        "cloudpickle",   # an env registered in __main__ (a notebook) reaches the worker processes (gymnasium has it)
        "nvidia-ml-py",  # the GPU's utilisation and memory in perf/ (NVML; without a driver it says so once)
    ],
    extras_require={
        # gymnasium's classic-control envs (CartPole ...) draw their frames with pygame: needed for
        # sfx.enjoy --save_video or a window on those envs, not for training. pygame-ce, not pygame: gymnasium,
        # vizdoom, minigrid (>= 2.4.0) and pettingzoo require pygame-ce, and the two share one package folder
        "render": ["pygame-ce>=2.4.0"],
        # env families, each optional: a missing one only matters to its own --env names
        # vizdoom 1.3 added DoomGame.is_episode_timeout_reached (sfx.envs.doom.env): with 1.2.x every doom env
        # crashes on its first step
        "doom": ["vizdoom>=1.3", "opencv-python-headless"],
        "atari": ["ale-py>=0.9", "opencv-python-headless"],
        "mujoco": ["mujoco>=3.0"],
        "minigrid": ["minigrid>=2.3"],
        # the pettingzoo_ family: PettingZoo's registry (1.27+); pygame and scipy are what its classic, sisl and
        # butterfly envs import (its own extras would also pull open_spiel)
        "pettingzoo": ["pettingzoo>=1.27", "pygame-ce>=2.4.0", "scipy"],
        # the football_ family: what gfootball imports; gfootball itself compiles a C++ engine, which
        # scripts/install_football.sh builds and installs (run it first; docs/environments/football.md). gym
        # before 0.26: gfootball 2.10.2's wrappers use the old reset (obs, not obs and info); six: undeclared
        "football": ["gym>=0.22,<0.26", "pygame-ce>=2.4.0", "scipy", "psutil", "absl-py", "six",
                     "opencv-python-headless"],
        # --env_backend=envpool (atari_, mujoco_, minigrid_) and the procgen_ family, whose only backend it is; EnvPool's
        # Procgen also needs the system Qt 5 runtime (scripts/install_qt5.sh). 1.2.5: what sfx.envs.envpool's
        # translation was measured against (docs/environments/envpool.md)
        "envpool": ["envpool>=1.2.5"],
        # --with_wandb (reinit="create_new" needs a recent wandb; tested with 0.31.0)
        "wandb": ["wandb>=0.19.10"],
        # python -m sfx.export --format=onnx (and onnxruntime to run the exported file)
        "export": ["onnx>=1.14", "onnxruntime>=1.16"],
        # the documentation site (mkdocs serve / mkdocs build --strict); pinned: the site is built offline
        # with these, and MkDocs 2 will break Material's plugins
        "docs": ["mkdocs==1.6.1", "mkdocs-material==9.7.6", "mkdocstrings[python]==1.0.8"],
        "test": ["pytest", "pytest-timeout", "pygame-ce>=2.4.0",
                 "mkdocs==1.6.1", "mkdocs-material==9.7.6", "mkdocstrings[python]==1.0.8",
                 "vizdoom>=1.3", "ale-py>=0.9", "mujoco>=3.0", "opencv-python-headless", "minigrid>=2.3",
                 "wandb>=0.19.10", "onnx>=1.14", "onnxruntime>=1.16", "pettingzoo>=1.27", "scipy", "envpool>=1.2.5",
                 "ruff==0.17.6"],  # pinned: a new ruff may add findings to a rule set, and tests/test_ruff.py runs it
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Operating System :: POSIX :: Linux",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
