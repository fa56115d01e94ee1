"""``DUMMY_SAMPLER``: no learning; uniformly random actions through the whole sampling path (rollout
workers, trajectory slots, queues), to measure raw sampling throughput (``python -m sfx.dummy_sampler``,
or ``python -m sfx.train --algo=DUMMY_SAMPLER``)."""

from __future__ import annotations

import argparse
from typing import Any, Mapping

import numpy as np
import torch

from sfx.agents.base import Acted, ActingRule, Agent
from sfx.cfg.flag_types import int_like
from sfx.errors import ConfigError


def random_action_rows(space: Any, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` uniformly random actions of ``space`` as stored in a trajectory slot (``[n, k]`` float32,
    categorical choices counted from 0: :func:`~sfx.algo.distributions.action_to_env` adds ``start``)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return rng.integers(int(space.n), size=(n, 1)).astype(np.float32)
    if isinstance(space, spaces.Tuple):
        return np.concatenate([random_action_rows(s, n, rng) for s in space.spaces], axis=1)
    if isinstance(space, spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec, dtype=np.int64).reshape(-1)
        return (rng.random((n, len(nvec))) * nvec).astype(np.int64).astype(np.float32)
    if isinstance(space, spaces.Box):
        low = np.broadcast_to(space.low, space.shape).reshape(-1).astype(np.float64)
        high = np.broadcast_to(space.high, space.shape).reshape(-1).astype(np.float64)
        bounded = np.isfinite(low) & np.isfinite(high)
        # unbounded dimensions get a standard normal, as a fresh Gaussian policy would act
        rows = rng.standard_normal((n, len(low)))
        rows[:, bounded] = rng.uniform(low[bounded], high[bounded], size=(n, int(bounded.sum())))
        return rows.astype(np.float32)
    raise ValueError(f"no random actions for action space {space!r}")


class RandomActingRule(ActingRule):
    """Uniformly random actions, whatever the model says; stores nothing besides them."""

    def __init__(self, action_space: Any, seed: int | None = None) -> None:
        self.action_space = action_space
        self.rng = np.random.default_rng(seed)

    def random_rows(self, n: int) -> np.ndarray:
        return random_action_rows(self.action_space, n, self.rng)

    def act(self, out: Mapping[str, torch.Tensor], deterministic: bool = False,
            actor_ids: torch.Tensor | None = None) -> Acted:
        n = next(iter(out.values())).shape[0]
        return Acted(torch.from_numpy(self.random_rows(n)), {})


class DummySampler(Agent):
    """See the module docstring: the engine's sampling path with random actions and no learner."""

    name = "DUMMY_SAMPLER"
    flag_group = "dummy sampler (python -m sfx.dummy_sampler, or --algo=DUMMY_SAMPLER)"
    entry_point = "sfx.dummy_sampler:main"

    @classmethod
    def add_flags(cls, g: argparse._ActionsContainer) -> None:
        g.add_argument("--sample_env_frames", type=int_like, default=1_000_000,
                       help="stop after this many env frames (agent steps x --env_frameskip, every agent counted); "
                            "lifted when only --timeout_seconds is given")
        g.add_argument("--timeout_seconds", type=float, default=None,
                       help="stop after sampling this long, counted from the moment every rollout worker steps "
                            "(env creation excluded); None = only --sample_env_frames stops")

    @classmethod
    def validate(cls, cfg: Any) -> None:
        if cfg.sample_env_frames <= 0:
            raise ConfigError(f"--sample_env_frames={cfg.sample_env_frames} must be a positive integer (> 0)")
        if cfg.timeout_seconds is not None and not cfg.timeout_seconds > 0:
            raise ConfigError(f"--timeout_seconds={cfg.timeout_seconds} must be > 0")

    @classmethod
    def acting_rule(cls, cfg: Any, action_space: Any, seed: int | None = None) -> ActingRule:
        return RandomActingRule(action_space, seed)

    @classmethod
    def pbt_hyperparameters(cls, cfg: Any) -> dict[str, tuple[float, float]]:
        return {}
