"""SAC's learning: the critics' step, the actor's, the temperature's and the target critics' Polyak update on a
minibatch of replayed transitions (see :mod:`sfx.agents.sac.agent`)."""

from __future__ import annotations

import math
from typing import Any, Iterator, Mapping

import torch

from sfx.agents.base import Agent, Batch
from sfx.agents.kit import NamedOptimizers, TargetNetwork, gradient_step
from sfx.agents.kit.transition_replay import rows_for
from sfx.agents.sac.flags import SACConfig
from sfx.algo.sac import (SquashedGaussian, actor_loss, clipped_double_q_target, critic_loss, default_target_entropy,
                          temperature_loss)

__all__ = ["SACLearning"]


class SACLearning(Agent):
    """One SAC learner's state beside the model (three optimizers, the target critics, the temperature, the
    replay) and its step; :class:`~sfx.agents.sac.agent.SAC` adds the declarations."""

    def __init__(self, cfg: Any, model: torch.nn.Module, device: torch.device, group: Any = None) -> None:
        super().__init__(cfg, model, device, group)
        self.config = SACConfig.from_cfg(cfg)
        # fused on the CPU too: measured faster there at one gradient step per env step
        # (docs/appendix/agents_flag_notes.md, "SAC: fused Adam on the CPU"); Adam's epsilon stays PyTorch's
        self.optimizers = NamedOptimizers(fused_on_cpu=True)
        self.actor_optimizer = self.optimizers.adam("actor_optimizer", model.actor.parameters(), "actor_learning_rate",
                                                    cfg)
        self.critic_optimizer = self.optimizers.adam("critic_optimizer", model.critic.parameters(),
                                                     "critic_learning_rate", cfg)
        self.log_alpha = torch.tensor(math.log(cfg.initial_alpha), device=device, requires_grad=True)
        self.alpha_optimizer = self.optimizers.adam("alpha_optimizer", [self.log_alpha], "alpha_learning_rate", cfg)
        self.critic_params = [p for p in model.critic.parameters() if p.requires_grad]
        self.actor_params = [p for p in model.actor.parameters() if p.requires_grad]
        self.target_critic = TargetNetwork(model.critic)
        self.unit = torch.ones(model.action_dim, device=device)
        self.target_entropy = (default_target_entropy(model.action_dim) if cfg.target_entropy is None
                               else float(cfg.target_entropy))
        self.generator: torch.Generator | None = None
        if device.type == "cpu":
            self.generator = torch.Generator()
            self.generator.manual_seed(0 if cfg.seed is None else int(cfg.seed) + 1)
        self.store: Any = None

    @property
    def alpha(self) -> torch.Tensor:
        if self.config.sac_alpha is not None:
            return torch.tensor(self.config.sac_alpha, device=self.device)
        return self.log_alpha.detach().exp()

    def sample_source(self, fresh: Any) -> Any:
        from sfx.agents.kit.transition_replay import TransitionReplay

        cfg = self.cfg
        self.store = TransitionReplay(fresh, cfg.replay_buffer_size, cfg.learning_starts, cfg.replay_ratio, cfg.gamma,
                                      cfg.n_step, self.device, seed=cfg.seed, reward_scale=cfg.reward_scale,
                                      reward_clip=cfg.reward_clip)
        return self.store

    def minibatches(self, batch: Batch) -> Iterator[tuple[dict[str, Any], torch.Tensor]]:
        return self.store.minibatches(self.gradient_steps_due(), self.config.batch_size)

    def gradient_steps_due(self) -> int:
        """The iteration's gradient steps: the replay ratio's (:meth:`TransitionReplay.due`); with ranks, the
        ranks' mean, so that every rank takes part in each step's all-reduce (none until every rank's replay
        holds something); each rank's credit keeps its difference from it."""
        m = self.config.batch_size
        k = self.store.due(m)
        if self.group is None:
            return k
        empty = self.group.any(self.store.valid_count == 0)
        total = int(self.group.sum(torch.tensor([float(k)]))[0])
        agreed = 0 if empty else total // self.group.world_size
        self.store.refund(k - agreed, m)
        return agreed

    def _dist(self, mean: torch.Tensor, log_std: torch.Tensor) -> SquashedGaussian:
        # the learner's actions are the squashed ones in [-1, 1] (module docstring: units)
        return SquashedGaussian(mean, log_std, -self.unit, self.unit, validate_args=False)

    def unit_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Env actions (the replay's) -> the learner's ``[-1, 1]`` units, ``2 (a - low) / (high - low) - 1``."""
        low, high = self.model.low, self.model.high
        return (2.0 * (actions.to(low.dtype) - low) / (high - low) - 1.0).clamp(-1.0, 1.0)

    def step(self, mb: dict[str, Any], valids: torch.Tensor) -> dict[str, float]:
        cfg, model = self.config, self.model
        alpha = self.alpha
        pre = model.preprocess(mb["obs"])
        with torch.no_grad():
            next_pre = model.preprocess(mb["next_obs"])
            next_features = self.target_critic.net.features(next_pre.x)
            # the next action from the current policy (its features: the online encoder's, as when acting)
            next_dist = self._dist(*model.policy(next_pre))
            next_sample = next_dist.rsample(self.generator)
            nq1, nq2 = model.q_values(next_pre, next_sample.action, next_features, critic=self.target_critic.net)
            zeros = torch.zeros_like(mb["rewards"], dtype=torch.bool)
            y = clipped_double_q_target(mb["rewards"], zeros, zeros, nq1, nq2, next_sample.log_prob, alpha,
                                        cfg.gamma, discounts=mb["discounts"])
        features = model.critic.features(pre.x)
        q1, q2 = model.q_values(pre, self.unit_actions(mb["actions"]), features)
        closs = critic_loss(q1, q2, y)
        # no gradient clipping (the paper's and SB3's); with ranks, every rank's minibatch counts alike
        gradient_step(closs.loss, self.critic_optimizer, self.critic_params, "critic loss", group=self.group)

        # the actor: through the critics' inputs only (their weights are frozen for this pass, so its backward
        # computes no weight gradients for them: ~10% of a step's matrix products), features detached
        features = features.detach()
        sample = self._dist(*model.policy(pre, features)).rsample(self.generator)
        for p in self.critic_params:
            p.requires_grad_(False)
        try:
            q1_pi, q2_pi = model.q_values(pre, sample.action, features)
        finally:
            for p in self.critic_params:
                p.requires_grad_(True)
        aloss = actor_loss(sample.log_prob, q1_pi, q2_pi, alpha)
        gradient_step(aloss, self.actor_optimizer, self.actor_params, "actor loss", group=self.group)

        stats: dict[str, float] = {}
        if cfg.sac_alpha is None:
            tloss = temperature_loss(self.log_alpha, sample.log_prob, self.target_entropy)
            gradient_step(tloss, self.alpha_optimizer, [self.log_alpha], "temperature loss", group=self.group)
            stats["loss/alpha"] = tloss.item()
        self.target_critic.polyak_update(model.critic, cfg.tau)
        stats.update({"loss/critic": closs.loss.item(), "loss/q1": closs.q1_loss.item(),
                      "loss/q2": closs.q2_loss.item(), "loss/actor": aloss.item(),
                      "q1_mean": float(q1.detach().mean()), "q2_mean": float(q2.detach().mean()),
                      "target_q_mean": float(y.mean()), "alpha": float(alpha),
                      "entropy": float(-sample.log_prob.detach().mean()),
                      "replay/age_mean": float(mb["age"].mean()), "replay/age_max": float(mb["age"].max())})
        return stats

    def end_iteration(self, batch: Batch) -> None:
        super().end_iteration(batch)  # the replay's batch: every active fresh step joins the input statistics
        batch.stats.update(self.store.stats())

    def learning_state(self) -> dict[str, Any]:
        return {**self.optimizers.state_dict(),
                "target_critic": self.target_critic.state_dict(), "log_alpha": self.log_alpha.detach().clone(),
                **({"replay": self.store.replay_state()}
                   if self.cfg.save_replay_buffer and self.group is None and self.store is not None else {})}

    def load_learning_state(self, state: Mapping[str, Any]) -> None:
        self.optimizers.load_state_dict(state)
        # no target saved: it starts as the loaded online critics
        self.target_critic.load_state_dict(state.get("target_critic"), self.model.critic)
        if "log_alpha" in state:
            with torch.no_grad():
                self.log_alpha.copy_(torch.as_tensor(state["log_alpha"]).to(self.log_alpha.device))
        if self.cfg.save_replay_buffer and self.group is None and state.get("replay") is not None:
            self.store.load_replay_state(state["replay"], rows_for(self.cfg.replay_buffer_size, self.cfg.rollout))

    def apply_params(self, params: Mapping[str, Any]) -> None:
        if params:  # new hyperparameters in cfg: the step's config follows them
            self.config = SACConfig.from_cfg(self.cfg)
        super().apply_params(params)

    def current_lr(self) -> float:
        return self.optimizers.lr("critic_optimizer")
