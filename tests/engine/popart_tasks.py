"""Two CartPole tasks for PopArt's demonstration (tests/engine/test_popart_learning.py, bench/popart_tasks.py):
``flipcart_plain`` is CartPole; ``flipcart_flipped`` is CartPole with its two actions swapped, so the two tasks
want opposite actions in the same states. Each appends a code for its task to the observation (``[1, 0]`` or
``[0, 1]``), so one policy can tell them apart and serve both. With rewards x1 and x1000
(``--multitask_reward_scales=1,1000``) the large task's advantages swamp the small one's policy gradient
unless each task's are put on its own scale (PopArt).

Registered on import: name this module in ``SFX_EXTRA_ENV_MODULES`` so the worker processes register it too.
"""

from __future__ import annotations

import gymnasium
import numpy as np

from sfx.envs.gym import make_gymnasium_as_agent
from sfx.envs.registry import register_env_family

PREFIX = "flipcart_"
VARIANTS = {"plain": 0, "flipped": 1}


class TaskCoded(gymnasium.Wrapper):
    """CartPole with the task's code appended to the observation; ``flip`` swaps the two actions."""

    def __init__(self, env: gymnasium.Env, code: int) -> None:
        super().__init__(env)
        self.code = np.eye(len(VARIANTS), dtype=np.float32)[code]
        self.flip = code == 1
        low = np.concatenate([env.observation_space.low, np.zeros(len(VARIANTS), np.float32)])
        high = np.concatenate([env.observation_space.high, np.ones(len(VARIANTS), np.float32)])
        self.observation_space = gymnasium.spaces.Box(low, high, dtype=np.float32)

    def _obs(self, obs):
        return np.concatenate([obs.astype(np.float32), self.code])

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._obs(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(1 - int(action) if self.flip else int(action))
        return self._obs(obs), reward, terminated, truncated, info


def make_flipcart(full_env_name: str, cfg, env_config=None, render_mode=None):
    variant = full_env_name[len(PREFIX):]
    if variant not in VARIANTS:
        raise ValueError(f"{full_env_name!r}: allowed {', '.join(PREFIX + v for v in VARIANTS)}")
    return make_gymnasium_as_agent("CartPole-v1", cfg, env_config, render_mode,
                                   wrap=lambda env: TaskCoded(env, VARIANTS[variant]))


register_env_family(PREFIX, make_flipcart, default_overrides={"encoder_type": "mlp"})
