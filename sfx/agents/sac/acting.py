"""SAC's acting rule: the squashed Gaussian, sampled while training (uniform for the warm-up's rows), its squashed
mean for evaluation, enjoy and export."""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from sfx.agents.base import Acted, ActingRule
from sfx.agents.kit.checks import acting_generator
from sfx.algo.sac import SquashedGaussian

__all__ = ["SquashedGaussianActing"]


class SquashedGaussianActing(ActingRule):
    """Samples the squashed Gaussian while training; its squashed mean for evaluation, enjoy and export.

    ``random_steps``: the policy's first ``random_steps`` acted rows are uniform over the Box instead (the warm-up
    of ``--random_warmup``: the replay's first ``--learning_starts`` transitions), spread over the acting processes
    :meth:`bind_actors` names (each acts its share, rounded up) and counted from it, so evaluation and enjoy never
    act at random.
    """

    stores_final_obs = True
    export_outputs = ("action_mean", "action_log_std")

    def __init__(self, low: Any, high: Any, seed: int | None = None, random_steps: int = 0) -> None:
        self.low = torch.as_tensor(low, dtype=torch.float32).reshape(-1)
        self.high = torch.as_tensor(high, dtype=torch.float32).reshape(-1)
        self.random_steps = int(random_steps)
        self.random_left = 0  # rows still to act uniformly (set by bind_actors: training policy workers only)
        self.fields = {}
        self.generator = acting_generator(seed)

    def _dist(self, out: Mapping[str, torch.Tensor]) -> SquashedGaussian:
        mean = out["action_mean"]
        return SquashedGaussian(mean, out["action_log_std"], self.low.to(mean.device), self.high.to(mean.device),
                                validate_args=False)

    def bind_actors(self, first: int, total: int, workers: int = 1) -> None:
        self.random_left = math.ceil(self.random_steps / max(1, workers))

    def act(self, out: Mapping[str, torch.Tensor], deterministic: bool = False,
            actor_ids: torch.Tensor | None = None) -> Acted:
        dist = self._dist(out)
        if deterministic:
            return Acted(dist.mode(), {})
        # the rule's own stream on CPU models (reproducible with --seed); a GPU draws from its own generator
        generator = self.generator if dist.mean.device.type == "cpu" else None
        actions = dist.sample(generator).action
        if self.random_left > 0:
            # the warm-up: the first rows uniform over the bounds (a batch may straddle its end)
            k = min(self.random_left, actions.shape[0])
            self.random_left -= k
            u = torch.rand(k, actions.shape[1], generator=self.generator)
            low, high = self.low, self.high
            actions = actions.clone()
            actions[:k] = (low + u * (high - low)).to(actions.device, actions.dtype)
        return Acted(actions, {})

    def mode_actions(self, out: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return self._dist(out).mode()
