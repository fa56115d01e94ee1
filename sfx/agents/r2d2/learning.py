"""R2D2's learning: a minibatch of replayed sequences is burnt in, then trained on n-step double-Q targets with
value rescaling; its new priorities go back to the replay through the learner shell (see
:mod:`sfx.agents.r2d2.agent`)."""

from __future__ import annotations

from typing import Any, Iterator, Mapping

import torch

from sfx.agents.base import Agent, Batch, Stepped
from sfx.agents.kit import TargetNetwork, gradient_step
from sfx.agents.r2d2.flags import R2D2Config, sequences
from sfx.algo.qlearning import double_q_targets, r2d2_loss, scale_rewards, sequence_priorities, td_errors

__all__ = ["R2D2Learning"]


class R2D2Learning(Agent):
    """One R2D2 learner's state beside the model (its optimizer, the target network, the replay) and its step;
    :class:`~sfx.agents.r2d2.agent.R2D2` adds the declarations."""

    def __init__(self, cfg: Any, model: torch.nn.Module, device: torch.device, group: Any = None) -> None:
        super().__init__(cfg, model, device, group)
        self.config = R2D2Config.from_cfg(cfg)
        self.optimizer = self.optimizers.adam("optimizer", model.parameters(), "learning_rate", cfg, eps=cfg.adam_eps)
        self.target = TargetNetwork(model)
        self.updates = 0  # learner steps, for the target network's period
        self.store: Any = None

    def sample_source(self, fresh: Any) -> Any:
        from sfx.agents.kit.sequence_replay import PrioritizedSequences

        cfg = self.cfg
        self.store = PrioritizedSequences(
            fresh, sequences(cfg, cfg.replay_buffer_size), cfg.burn_in,
            sequences(cfg, cfg.learning_starts) if cfg.learning_starts else 0, cfg.replay_ratio,
            lambda: self.config.sequences_per_minibatch, cfg.priority_exponent, cfg.importance_sampling_exponent,
            cfg.priority_eta, cfg.gamma, cfg.n_step, cfg.value_function_rescaling_epsilon, self.device, seed=cfg.seed,
            reward_scale=cfg.reward_scale, reward_clip=cfg.reward_clip)
        return self.store

    def minibatches(self, batch: Batch) -> Iterator[tuple[dict[str, Any], torch.Tensor]]:
        return self.store.minibatches(self.store.due(), lambda: self.config.sequences_per_minibatch)

    def step(self, mb: dict[str, Any], valids: torch.Tensor) -> Stepped:
        cfg, model, target = self.config, self.model, self.target.net
        Bn = cfg.burn_in
        n, L = mb["rewards"].shape
        T = L - Bn
        done = mb["terminated"] | mb["truncated"]
        # the state before step t is the initial one when the episode ended at step t - 1
        resets = torch.cat([torch.zeros_like(done[:, :1]), done], dim=1)  # [n, L + 1]
        obs = mb["obs"]
        state0 = mb["state0"]
        if Bn:
            prefix = {k: v[:, :Bn] for k, v in obs.items()}
            keep = mb["has_prefix"].unsqueeze(1)
            h = torch.where(keep, model.advance_states(prefix, state0, resets[:, :Bn]), state0)
            h_target = torch.where(keep, target.advance_states(prefix, state0, resets[:, :Bn]), state0)
        else:
            h = h_target = state0
        trained_obs = {k: v[:, Bn:] for k, v in obs.items()}  # T + 1 observations
        trained_resets = resets[:, Bn:]
        q = model.forward_sequence(trained_obs, h, trained_resets)  # [n, T + 1, A]
        with torch.no_grad():
            q_target = target.forward_sequence(trained_obs, h_target, trained_resets)
        rewards = scale_rewards(mb["rewards"][:, Bn:], cfg.reward_scale, cfg.reward_clip)  # APPO's unit
        term, trunc = mb["terminated"][:, Bn:], mb["truncated"][:, Bn:]
        # a time-limit step's final observation: its greedy Q-value as the acting weights computed it
        trunc_q = mb["trunc_q"][:, Bn:].unsqueeze(2).expand(-1, -1, q.shape[2])
        targets = double_q_targets(rewards, term, trunc, q[:, 1:].detach(), q_target[:, 1:], trunc_q, trunc_q,
                                   cfg.gamma, cfg.n_step, cfg.value_function_rescaling_epsilon,
                                   active=mb["active"][:, Bn:])
        actions = mb["actions"][:, Bn:, 0].long()
        q_taken = q[:, :T].gather(2, actions.unsqueeze(2)).squeeze(2)
        td = td_errors(q_taken, targets.targets)
        loss = r2d2_loss(td, valids, mb["weights"])
        grad_norm = gradient_step(loss.loss, self.optimizer, model.parameters(), max_grad_norm=cfg.max_grad_norm)
        # handed back to the replay by the learner shell, through its sample source
        priorities = sequence_priorities(loss.td_abs, valids, cfg.priority_eta).detach()
        self.updates += 1
        if self.updates % cfg.target_update_period == 0:
            self.target.hard_update(model)
        v = valids.float()
        count = v.sum().clamp(min=1.0)
        stats = {"loss/total": loss.loss.item(), "loss/td": loss.loss.item(),
                 "q_mean": float((q_taken.detach() * v).sum() / count),
                 "q_max_mean": float((q[:, :T].detach().max(dim=2).values * v).sum() / count),
                 "td_abs_mean": float((loss.td_abs * v).sum() / count), "td_abs_max": float(loss.td_abs.max()),
                 "grad_norm": grad_norm.item(), "priority_new_mean": float(priorities.mean()),
                 "importance_weight_min": float(mb["weights"].min()),
                 "replay/age_mean": float(mb["age"].mean()), "replay/age_max": float(mb["age"].max()),
                 "burn_in_fraction": float(mb["has_prefix"].float().mean())}
        return Stepped(stats, mb["ids"], priorities)

    def end_iteration(self, batch: Batch) -> None:
        super().end_iteration(batch)
        batch.stats.update(self.store.stats())  # the stored priorities' spread, once per iteration

    def learning_state(self) -> dict[str, Any]:
        state = {**self.optimizers.state_dict(), "target_model": self.target.state_dict(),
                 "target_updates": self.updates}
        if self.cfg.save_replay_buffer and self.group is None and self.store is not None:
            state["replay"] = self.store.replay_state()
        return state

    def load_learning_state(self, state: Mapping[str, Any]) -> None:
        self.optimizers.load_state_dict(state)
        # no target network saved: it starts as the loaded online weights
        self.target.load_state_dict(state.get("target_model"), self.model)
        self.updates = int(state.get("target_updates", self.updates))
        if self.cfg.save_replay_buffer and self.group is None and state.get("replay") is not None:
            self.store.load_replay_state(state["replay"], sequences(self.cfg, self.cfg.replay_buffer_size))

    def apply_params(self, params: Mapping[str, Any]) -> None:
        if params:  # new hyperparameters in cfg: the step's config follows them
            self.config = R2D2Config.from_cfg(self.cfg)
        super().apply_params(params)
