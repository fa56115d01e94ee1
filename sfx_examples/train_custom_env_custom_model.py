"""A custom gymnasium env with image observations and a custom encoder, trained with sfx.

Run::

    python -m sfx_examples.train_custom_env_custom_model                 # ~30 s on 2 CPU cores
    python -m sfx_examples.train_custom_env_custom_model --train_for_env_steps=1e6 --num_workers=8

Any ``sfx.train`` flag can be added; it replaces this example's default. Evaluate the result with
``python -m sfx.enjoy --env=goal_grid --experiment=goal_grid_example`` after importing this module
(e.g. ``SFX_EXTRA_ENV_MODULES=sfx_examples.train_custom_env_custom_model``).

The two registrations below sit at the module's top level on purpose: sfx's worker processes
import the main module again, and must find the env and the encoder registered there too.
"""

from __future__ import annotations

import sys
from typing import Any

import gymnasium
import numpy as np
import torch
from torch import nn

import sfx.train
from sfx.envs import register_env
from sfx.models import register_encoder
from sfx_examples._cli import with_defaults

ENV_NAME = "goal_grid"
ENCODER_NAME = "goal_grid_cnn"


class GoalGridEnv(gymnasium.Env):
    """Walk to the goal on a small grid with a few random walls.

    Observation: uint8 image ``(3, size, size)`` (channels first): the agent, the goal, the walls,
    255 where present. Actions: 0 up, 1 down, 2 left, 3 right (into a wall or the border: no move).
    Reward: +1 on reaching the goal (episode terminates), -0.01 per step otherwise; truncated after
    ``max_steps``. The last step's info carries ``episode_extra_stats`` (``success``), which sfx
    averages next to the episode reward.
    """

    metadata = {"render_modes": ["rgb_array"]}
    MOVES = np.array([(-1, 0), (1, 0), (0, -1), (0, 1)])

    def __init__(self, size: int = 6, num_walls: int = 4, max_steps: int = 40, render_mode: str | None = None):
        self.size, self.num_walls, self.max_steps = size, num_walls, max_steps
        self.render_mode = render_mode
        self.observation_space = gymnasium.spaces.Box(0, 255, (3, size, size), np.uint8)
        self.action_space = gymnasium.spaces.Discrete(4)
        self.agent = np.zeros(2, np.int64)
        self.goal = np.zeros(2, np.int64)
        self.walls = np.zeros((size, size), bool)
        self.steps = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.observation_space.shape, np.uint8)
        obs[0][tuple(self.agent)] = 255
        obs[1][tuple(self.goal)] = 255
        obs[2][self.walls] = 255
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        # agent, goal and walls on distinct cells
        cells = self.np_random.choice(self.size * self.size, size=2 + self.num_walls, replace=False)
        rows, cols = np.divmod(cells, self.size)
        self.agent = np.array([rows[0], cols[0]])
        self.goal = np.array([rows[1], cols[1]])
        self.walls = np.zeros((self.size, self.size), bool)
        self.walls[rows[2:], cols[2:]] = True
        self.steps = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        target = self.agent + self.MOVES[int(action)]
        if (0 <= target).all() and (target < self.size).all() and not self.walls[tuple(target)]:
            self.agent = target
        self.steps += 1
        terminated = bool((self.agent == self.goal).all())
        truncated = not terminated and self.steps >= self.max_steps
        info: dict = {}
        if terminated or truncated:
            info["episode_extra_stats"] = {"success": float(terminated)}
        return self._obs(), 1.0 if terminated else -0.01, terminated, truncated, info

    def render(self) -> np.ndarray:
        # the channels as RGB, each cell 16 pixels wide
        return np.kron(self._obs().transpose(1, 2, 0), np.ones((16, 16, 1), np.uint8))


class GoalGridEncoder(nn.Module):
    """Two 3x3 same-padding convolutions (a grid cell is one pixel: no striding) and a linear layer.

    Input ``[N, 3, size, size]`` floats in [0, 1] (sfx divides images by ``--obs_scale``);
    output ``[N, out_size]``.
    """

    def __init__(self, cfg: Any, obs_space: gymnasium.spaces.Box):
        super().__init__()
        channels, height, width = obs_space.shape
        self.out_size = cfg.hidden_size
        self.net = nn.Sequential(
            nn.Conv2d(channels, 16, 3, padding=1), nn.ELU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ELU(),
            nn.Flatten(),
            nn.Linear(32 * height * width, self.out_size), nn.ELU(),
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


def make_goal_grid(full_env_name: str, cfg: Any, env_config: dict, render_mode: str | None = None) -> GoalGridEnv:
    """sfx's env factory: ``(env name, cfg, env_config, render_mode)`` -> a gymnasium env (seeded by sfx)."""
    return GoalGridEnv(render_mode=render_mode)


# Defaults for this env (any command-line flag still wins): the custom encoder, a small
# feed-forward model (the grid is fully observed), short rollouts for a short episode.
register_env(ENV_NAME, make_goal_grid, default_overrides={
    "encoder_type": ENCODER_NAME, "hidden_size": 64, "use_rnn": False,
    "rollout": 32, "recurrence": 32, "batch_size": 512, "learning_rate": 1e-3,
})
register_encoder(ENCODER_NAME, GoalGridEncoder)

DEFAULT_ARGS = [
    f"--env={ENV_NAME}", "--experiment=goal_grid_example", "--train_dir=./train_dir", "--device=cpu",
    "--num_workers=2", "--num_envs_per_worker=8", "--train_for_env_steps=150000",
]


def main(argv: list[str] | None = None) -> int:
    """Train on GoalGridEnv; ``argv`` (default ``sys.argv[1:]``) adds or replaces sfx.train flags."""
    return sfx.train.main(with_defaults(DEFAULT_ARGS, argv))


if __name__ == "__main__":
    sys.exit(main())
