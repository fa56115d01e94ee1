"""The dummy sampler's acting rule: uniformly random actions of any action space, as the slots store them."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from sfx.agents.base import Acted, ActingRule

__all__ = ["RandomActingRule", "random_action_rows"]


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
