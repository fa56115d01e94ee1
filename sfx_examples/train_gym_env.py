"""Train on any registered gymnasium env through the ``gym_`` family: the env id after ``gym_``.

Run::

    python -m sfx_examples.train_gym_env                                  # CartPole-v1, ~30 s on 2 CPU cores
    python -m sfx_examples.train_gym_env --env=gym_Acrobot-v1 --experiment=acrobot --train_for_env_steps=2e6

which is the same as ``python -m sfx.train --env=gym_CartPole-v1 ...`` with the defaults below.
Your own gymnasium env works the same way once ``gymnasium.register(id=..., entry_point=...)`` has
run, or with ``--env=gym_mypackage.envs:MyEnv-v0`` (gymnasium imports ``mypackage.envs`` first).
"""

from __future__ import annotations

import sys

import sfx.train
from sfx_examples._cli import with_defaults

DEFAULT_ARGS = [
    "--env=gym_CartPole-v1", "--experiment=cartpole_example", "--train_dir=./train_dir", "--device=cpu",
    "--num_workers=2", "--num_envs_per_worker=8", "--use_rnn=False", "--learning_rate=1e-3",
    "--train_for_env_steps=100000",
]


def main(argv: list[str] | None = None) -> int:
    """Train; ``argv`` (default ``sys.argv[1:]``) adds or replaces sfx.train flags."""
    return sfx.train.main(with_defaults(DEFAULT_ARGS, argv))


if __name__ == "__main__":
    sys.exit(main())
