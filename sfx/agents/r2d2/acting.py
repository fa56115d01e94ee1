"""R2D2's acting rule: epsilon-greedy over the Q-values, one epsilon per actor (Ape-X's ladder)."""

from __future__ import annotations

from typing import Mapping

import torch

from sfx.agents.base import Acted, ActingRule, FieldSpec
from sfx.agents.kit.checks import acting_generator
from sfx.algo.qlearning import actor_epsilons

__all__ = ["EpsilonGreedy"]


class EpsilonGreedy(ActingRule):
    """Epsilon-greedy over the Q-values, one epsilon per actor (see :mod:`sfx.agents.r2d2.agent`)."""

    truncation_field = "trunc_q"
    export_outputs = ("q_values",)

    def __init__(self, num_actions: int, base: float, alpha: float, eval_epsilon: float,
                 seed: int | None = None) -> None:
        self.num_actions = int(num_actions)
        self.base, self.alpha, self.eval_epsilon = float(base), float(alpha), float(eval_epsilon)
        self.epsilons: torch.Tensor | None = None  # per actor of this rank, after bind_actors
        self.generator = acting_generator(seed)
        self.fields = {"q_taken": FieldSpec(()), "q_max": FieldSpec(()), "trunc_q": FieldSpec(()),
                       "epsilon": FieldSpec(()), "actor_ids": FieldSpec((), torch.int64)}

    def bind_actors(self, first: int, total: int, workers: int = 1) -> None:
        self.epsilons = actor_epsilons(total, self.base, self.alpha)[first:]

    def act(self, out: Mapping[str, torch.Tensor], deterministic: bool = False,
            actor_ids: torch.Tensor | None = None) -> Acted:
        q = out["q_values"]
        n = q.shape[0]
        greedy = q.argmax(dim=1)
        if deterministic or self.epsilons is None or actor_ids is None:
            eps = torch.full((n,), self.eval_epsilon)
        else:
            eps = self.epsilons[actor_ids.cpu().long()]
        explore = torch.rand(n, generator=self.generator) < eps
        # a random action among the allowed ones (masked actions' Q-values are MASKED_LOGIT)
        allowed = (q > -1e8).cpu()
        random = torch.multinomial(allowed.float() + (~allowed.any(dim=1, keepdim=True)).float(), 1,
                                   generator=self.generator).squeeze(1)
        actions = torch.where(explore, random, greedy.cpu()).to(q.device)
        ids = actor_ids.long() if actor_ids is not None else torch.full((n,), -1, dtype=torch.long)
        fields = {"q_taken": q.gather(1, actions.unsqueeze(1)).squeeze(1), "q_max": q.max(dim=1).values,
                  "epsilon": eps.to(q.device), "actor_ids": ids.to(q.device)}
        return Acted(actions.float().reshape(n, 1), fields)

    def mode_actions(self, out: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return out["q_values"].argmax(dim=1, keepdim=True)

    def truncation_values(self, out: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return out["q_values"].max(dim=1).values
