"""APPO's acting rule: sample the policy head's distribution, store what the learning step needs of it."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from sfx.agents.base import Acted, ActingRule, FieldSpec
from sfx.algo.distributions import action_params_size, categorical_sizes, make_action_distribution

__all__ = ["APPOActingRule"]


class APPOActingRule(ActingRule):
    """Sample from the policy head's distribution (its mode with ``deterministic``); store the action's
    log-prob, the distribution's parameters (for the KL terms) and the value; a time-limit step's final
    observation gets its value computed with the acting weights (``trunc_values``, bootstrapped from).
    With ``feature_size`` (replay with a custom buffer) also the policy trunk's core output (``features``),
    which attentive and elite sampling compare with the same trajectory's features under newer weights."""

    truncation_field = "trunc_values"

    def __init__(self, action_space: Any, feature_size: int = 0) -> None:
        self.action_space = action_space
        self._sizes = categorical_sizes(action_space)
        self.fields = {"log_probs": FieldSpec(()), "action_params": FieldSpec((action_params_size(action_space),)),
                       "values": FieldSpec(()), "trunc_values": FieldSpec(())}
        self.feature_size = int(feature_size)
        if self.feature_size:
            self.fields["features"] = FieldSpec((self.feature_size,))

    def act(self, out: Mapping[str, torch.Tensor], deterministic: bool = False,
            actor_ids: torch.Tensor | None = None) -> Acted:
        params = out["action_params"]
        n = params.shape[0]
        dist = make_action_distribution(self.action_space, params)
        actions = self.mode_actions(out) if deterministic else dist.sample()
        log_probs = dist.log_prob(actions)
        fields = {"log_probs": log_probs, "action_params": params, "values": out["values"]}
        if self.feature_size:
            fields["features"] = out["core_output"]
        return Acted(actions.float().reshape(n, -1), fields)

    def mode_actions(self, out: Mapping[str, torch.Tensor]) -> torch.Tensor:
        params = out["action_params"]
        if self._sizes is None:
            return params[:, :params.shape[1] // 2]  # DiagGaussian's mode: the mean
        # Categorical's mode: the argmax of the log-probabilities, per head
        return torch.cat([torch.log_softmax(logits, dim=-1).argmax(dim=-1, keepdim=True)
                          for logits in torch.split(params, self._sizes, dim=-1)], dim=1)

    def truncation_values(self, out: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return out["values"]
