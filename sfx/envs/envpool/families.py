"""What the families' EnvPool translations share (each family translates its own flags, in its own module:
``atari_options`` / ``make_atari_vector`` in :mod:`sfx.envs.atari`, and so on), and :class:`VectorAsEnv`.

A family's ``make_vector_fn`` returns None unless ``--env_backend=envpool``, so the Python envs stay the default
where the family has them. Its ``*_options`` function raises :class:`ConfigError` for a value EnvPool cannot serve;
the family's ``validate_fn`` calls it, so that bad input fails before any process starts.
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium
import numpy as np

from sfx.envs.envpool import not_served
from sfx.envs.envpool.vector import EnvPoolVector
from sfx.envs.multi_agent import MultiAgentEnv
from sfx.envs.registry import env_seed
from sfx.errors import ConfigError

# a time limit of "none": EnvPool counts elapsed steps in an int32
NO_LIMIT = 2 ** 31 - 1


def is_evaluation(cfg: Any) -> bool:
    """Whether ``cfg`` was parsed for sfx.enjoy (an evaluation plays whole games: no episodic life)."""
    # only a cfg parsed for sfx.enjoy has the evaluation flags
    return hasattr(cfg, "max_num_episodes")


def seeds_for(cfg: Any, env_configs: list[dict]) -> list[int | None]:
    """Each env's seed (``cfg.seed + env_id``, None unseeded)."""
    return [env_seed(cfg, c) for c in env_configs]


def check_no_frameskip(cfg: Any, why: str) -> None:
    """:class:`ConfigError` (naming ``why``) unless ``--env_frameskip`` is 1."""
    if cfg.env_frameskip != 1:
        raise not_served("--env_frameskip", cfg.env_frameskip, f"1 ({why})")


# ------------------------------------------------------------------------------------ one env

class VectorAsEnv(MultiAgentEnv):
    """A one-env :class:`EnvPoolVector` as a one-agent :class:`~sfx.envs.multi_agent.MultiAgentEnv` (the probe env,
    the evaluator's and sfx.enjoy's envs of a family whose only backend is EnvPool).

    ``render()`` (``rgb_array``) returns the last observation as an ``H x W x 3`` frame: Procgen's observation is the
    game's picture."""

    num_agents = 1

    def __init__(self, make_vector: Callable[[list[dict]], EnvPoolVector], env_config: dict) -> None:
        self.vector = make_vector([env_config])
        self.observation_space = self.vector.observation_space
        self.action_space = self.vector.action_space
        self.default_seed = self.vector.seeds[0]
        self.last_obs: Any = None

    def reset(self, seed: int | None = None) -> tuple[list[Any], list[dict]]:
        obs = self.vector.reset([seed if seed is not None else self.default_seed])
        self.last_obs = obs[0].copy()
        return [self.last_obs], [{}]

    def step(self, actions: list[Any]) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        if len(actions) != 1:
            raise ValueError(f"a single-agent env takes a list of 1 action, got {len(actions)}")
        row = np.asarray(actions[0], dtype=np.float32).reshape(1, -1)
        if isinstance(self.action_space, gymnasium.spaces.Discrete) and self.action_space.start:
            row = row - np.float32(self.action_space.start)  # the vector adds start back, as to a stored row
        step = self.vector.step(row)
        info: dict = {}
        event = step.events.get(0)
        if event is not None:
            info["final_obs"] = event.final_obs
            if event.episode is not None:
                info["episode"] = event.episode
        self.last_obs = step.obs[0].copy()
        return [self.last_obs], [float(step.rewards[0])], [bool(step.terminated[0])], [bool(step.truncated[0])], [info]

    def render(self) -> Any:
        if self.last_obs is None or self.last_obs.ndim != 3:
            return None
        return np.ascontiguousarray(np.moveaxis(self.last_obs, 0, -1)) if self.last_obs.shape[0] == 3 else self.last_obs

    def close(self) -> None:
        self.vector.close()
