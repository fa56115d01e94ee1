"""Real experiment folders for the sfx_tb tests: a small CartPole sweep trained by sfx.

The sweep is laid out the way the runner lays one out (``<train_dir>/<run>/<NN>_<name>_<key>=<value>_...``,
trained with ``--train_dir=<train_dir>/<run> --experiment=<name>``): 2 learning rates x 2 seeds, in
serial mode, 12k env steps each (a few seconds), two trainings at a time (one process per seed, so torch is imported twice,
not four times).
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN = "sweep"
SEEDS = (1, 2)
LEARNING_RATES = (0.0001, 0.001)
TRAIN_ENV_STEPS = 12_000


def experiment_name(index: int, seed: int, lr: float) -> str:
    """The runner's folder name for ParamGrid([("seed", ...), ("learning_rate", ...)])."""
    return f"{index:02d}_cartpole_see={seed}_lea={lr!r}"


EXPERIMENTS = {experiment_name(i * len(LEARNING_RATES) + j, seed, lr): (seed, lr)
               for i, seed in enumerate(SEEDS) for j, lr in enumerate(LEARNING_RATES)}

TRAIN_SCRIPT = textwrap.dedent("""
    import sys
    from sfx.train import main
    train_dir, runs = sys.argv[1], sys.argv[2:]
    for run in runs:
        name, seed, lr = run.split(",")
        rc = main(["--env=gym_CartPole-v1", f"--seed={seed}", f"--learning_rate={lr}", "--device=cpu",
                   "--serial_mode=True", "--num_workers=2", "--num_envs_per_worker=4", "--batch_size=256",
                   "--hidden_size=32", "--use_rnn=False", "--experiment_summaries_interval=0.1",
                   "--train_for_env_steps=%d", "--save_every_sec=1000",
                   f"--train_dir={train_dir}", f"--experiment={name}"])
        if rc != 0:
            sys.exit(f"training {name} exited with {rc}")
""" % TRAIN_ENV_STEPS)


def subprocess_env() -> dict[str, str]:
    """The environment of a child Python: the repository importable whatever was installed."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO)}


@pytest.fixture(scope="session")
def train_root(tmp_path_factory) -> Path:
    """A train dir holding ``sweep/`` with 4 finished experiments (read-only for the tests: copy first
    to change it)."""
    root = tmp_path_factory.mktemp("tb_train_dir")
    procs = []
    for seed in SEEDS:
        runs = [f"{name},{s},{lr!r}" for name, (s, lr) in EXPERIMENTS.items() if s == seed]
        procs.append(subprocess.Popen([sys.executable, "-c", TRAIN_SCRIPT, str(root / RUN), *runs], cwd=REPO,
                                      env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    for proc in procs:
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, out[-3000:]
    return root


@pytest.fixture(scope="session")
def sweep_experiments() -> dict[str, tuple[int, float]]:
    """``{folder name under sweep/: (seed, learning rate)}`` of :func:`train_root`'s experiments."""
    return dict(EXPERIMENTS)


@pytest.fixture(scope="session")
def child_env() -> dict[str, str]:
    """Environment for a child ``python -m sfx.tb``: the repository importable."""
    return subprocess_env()
