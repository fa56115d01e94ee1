"""A small agent written the way a user writes one, outside the sfx package: vanilla policy gradient with
a learned baseline (REINFORCE / A2C-style, Williams 1992; Mnih et al. 2016), one optimizer step per batch.

It declares its own acting rule and trajectory fields (the behaviour log-prob; the final observation of
a time-limit step, bootstrapped from with the current weights), its flags, their validation, its PBT
hyperparameters and its learning state; the engine's modules are not touched. Register with
``register_agent(PolicyGradient)`` and run ``python -m sfx.train --algo=TEST_PG ...``.
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Mapping

import torch

from sfx.agents import Acted, ActingRule, Agent, Batch, FieldSpec, NonFiniteBatch
from sfx.algo.distributions import make_action_distribution
from sfx.algo.gae import gae
from sfx.errors import ConfigError


class SampleAndRemember(ActingRule):
    """Sample from the policy head; store the sample's log-prob; keep time-limit steps' final observations."""

    stores_final_obs = True

    def __init__(self, action_space: Any) -> None:
        self.action_space = action_space
        self.fields = {"behaviour_log_prob": FieldSpec(())}

    def act(self, out: Mapping[str, torch.Tensor], deterministic: bool = False,
            actor_ids: torch.Tensor | None = None) -> Acted:
        dist = make_action_distribution(self.action_space, out["action_params"])
        actions = dist.mode() if deterministic else dist.sample()
        n = actions.shape[0]
        return Acted(actions.float().reshape(n, -1), {"behaviour_log_prob": dist.log_prob(actions)})

    def mode_actions(self, out: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return make_action_distribution(self.action_space, out["action_params"]).mode()


class PolicyGradient(Agent):
    name = "TEST_PG"
    flag_group = "policy gradient (--algo=TEST_PG, a test agent)"

    @classmethod
    def add_flags(cls, parser) -> None:
        parser.add_argument("--pg_entropy_coeff", type=float, default=0.01, help="entropy bonus coefficient")
        parser.add_argument("--pg_value_coeff", type=float, default=0.5, help="baseline (value) loss coefficient")

    @classmethod
    def validate(cls, cfg: Any) -> None:
        for name in ("pg_entropy_coeff", "pg_value_coeff"):
            if not getattr(cfg, name) >= 0:
                raise ConfigError(f"--{name}={getattr(cfg, name)} must be >= 0")

    @classmethod
    def acting_rule(cls, cfg: Any, action_space: Any) -> ActingRule:
        return SampleAndRemember(action_space)

    @classmethod
    def pbt_hyperparameters(cls, cfg: Any) -> dict[str, tuple[float, float]]:
        return {"learning_rate": (1e-5, 1e-2), "pg_entropy_coeff": (1e-4, 0.1)}

    def __init__(self, cfg: Any, model: torch.nn.Module, device: torch.device, group: Any = None) -> None:
        super().__init__(cfg, model, device, group)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
        self.final_values_seen = 0  # time-limit steps bootstrapped from their stored final observation

    def minibatches(self, batch: Batch) -> Iterator[tuple[dict[str, Any], torch.Tensor]]:
        yield batch.data, batch.valids

    def step(self, mb: dict[str, Any], valids: torch.Tensor) -> dict[str, float]:
        model, cfg = self.model, self.cfg
        n, T = mb["rewards"].shape
        done = mb["terminated"] | mb["truncated"]
        out = model.forward_trajectories(mb["obs"], mb["rnn_states"], done, cfg.recurrence if cfg.use_rnn else T)
        dist = make_action_distribution(model.action_space, out.action_params.reshape(n * T, -1))
        log_prob = dist.log_prob(mb["actions"].reshape(n * T, -1)).reshape(n, T)
        rewards = mb["rewards"].clone()
        trunc = mb["truncated"] & ~mb["terminated"]
        if bool(trunc.any()):
            # a time-limit step: its return goes on from the real next state, valued with today's weights
            final = {k: v[trunc] for k, v in mb["final_obs"].items()}
            with torch.no_grad():
                states = model.initial_rnn_states(int(trunc.sum()), self.device)
                rewards[trunc] += cfg.gamma * model.forward_step(final, states)["values"]
            self.final_values_seen += int(trunc.sum())
        discounts = cfg.gamma * (~done).float()
        targets = gae(rewards.T, out.values.detach().T, out.bootstrap_values, discounts.T, 1.0)
        returns, adv = targets.returns.T, targets.advantages.T
        weight = valids.float() / valids.float().sum().clamp(min=1.0)
        policy_loss = -(log_prob * adv * weight).sum()
        entropy = (dist.entropy().reshape(n, T) * weight).sum()
        if model.returns_normalizer is not None:
            model.returns_normalizer.update(returns[valids])
        value_loss = ((out.values_normalized - model.normalize_values(returns)) ** 2 * weight).sum()
        loss = policy_loss + cfg.pg_value_coeff * value_loss - cfg.pg_entropy_coeff * entropy
        if not bool(torch.isfinite(loss)):
            raise NonFiniteBatch("loss")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm or math.inf)
        self.optimizer.step()
        return {"loss/total": loss.item(), "loss/policy": policy_loss.item(), "loss/value": value_loss.item(),
                "entropy": entropy.item(), "grad_norm": grad_norm.item(),
                "final_values_seen": float(self.final_values_seen)}

    def learning_state(self) -> dict[str, Any]:
        return {"pg_optimizer": self.optimizer.state_dict()}

    def load_learning_state(self, state: Mapping[str, Any]) -> None:
        if "pg_optimizer" in state:
            self.optimizer.load_state_dict(state["pg_optimizer"])

    def apply_params(self, params: Mapping[str, Any]) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = float(self.cfg.learning_rate)
