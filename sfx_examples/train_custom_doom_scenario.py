"""A VizDoom scenario of your own, trained with sfx: ``--env=doom_medkit_run``.

Run::

    python -m sfx_examples.train_custom_doom_scenario                    # a few minutes on 2 CPU cores
    python -m sfx_examples.train_custom_doom_scenario --num_workers=8 --train_for_env_steps=5e6

A scenario is a VizDoom ``.cfg`` (episode length, buttons, game variables, rewards) and a map
(``.wad``). Ours, ``doom_scenarios/medkit_run.cfg`` beside this file, plays the bundled
``health_gathering.wad``: the floor hurts, medkits heal, and the reward is sfx's reward shaping
(``health_delta``, ``death``) rather than the map's own. ``register_doom_scenario`` gives it an env
name; every ``doom_`` flag works on it (``--res_w``, ``--doom_measurements``, ``--doom_action_space``,
``--doom_reward_shaping`` ...). The agent also observes its health (``--doom_measurements``), read by
the model beside the image.

Evaluate with ``python -m sfx.enjoy --env=doom_medkit_run --experiment=medkit_run_example`` after
importing this module (``SFX_EXTRA_ENV_MODULES=sfx_examples.train_custom_doom_scenario``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import sfx.train
from sfx.envs.doom import DoomScenario, register_doom_scenario
from sfx_examples._cli import with_defaults

SCENARIO = DoomScenario(
    name="medkit_run",
    cfg_file=str(Path(__file__).resolve().parent / "doom_scenarios" / "medkit_run.cfg"),
    wad_file="health_gathering.wad",  # bundled with vizdoom: found in vizdoom.scenarios_path
    description="stay alive on an acid floor by running over medkits; reward = health gained",
)

# at the top level: worker processes import this module again and find the env registered
ENV_NAME = register_doom_scenario(SCENARIO, default_overrides={
    "doom_reward_shaping": "health_delta=0.01,death=-1",
    "doom_measurements": True,
    "res_w": 64, "res_h": 48,
})

DEFAULT_ARGS = [
    f"--env={ENV_NAME}", "--experiment=medkit_run_example", "--train_dir=./train_dir", "--device=cpu",
    "--num_workers=2", "--num_envs_per_worker=8", "--batch_size=1024", "--learning_rate=3e-4",
    "--train_for_env_steps=300000",
]


def main(argv: list[str] | None = None) -> int:
    """Train; ``argv`` (default ``sys.argv[1:]``) adds or replaces sfx.train flags."""
    return sfx.train.main(with_defaults(DEFAULT_ARGS, argv))


if __name__ == "__main__":
    sys.exit(main())
