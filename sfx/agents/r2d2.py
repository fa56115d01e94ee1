"""R2D2 (Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed Reinforcement Learning"), with
central inference as in SEED RL (Espeholt et al. 2020): ``--algo=R2D2``.

Acting (the policy workers batch every actor's inference): a dueling recurrent Q-network
(:class:`~sfx.models.q_network.QNetwork`, any encoder, no core / GRU / LSTM); actor ``i`` of ``N`` acts
epsilon-greedily with ``epsilon_i = base^(1 + alpha i / (N - 1))`` (Ape-X; base 0.4, alpha 7), evaluation
and ``sfx.enjoy`` with ``--eval_epsilon``. It stores per step the action's Q-value, the greedy Q-value
(initial priorities), its epsilon and actor id, and for a time-limit step the greedy Q-value of the final
observation (bootstrapped from).

Learning: fresh trajectories become overlapping sequences with a burn-in prefix in a prioritized replay
(:mod:`sfx.agents.sequence_replay`); ``--replay_ratio`` decides how many minibatches each iteration trains.
A step: burn-in of the online and target networks from the stored state (no gradient), Q-values over the
trained steps, n-step double-Q targets with value rescaling on the rewards scaled and clipped as APPO's
(``--reward_scale``, ``--reward_clip``) (:mod:`sfx.algo.qlearning`; terminations cut
the bootstrap, truncations bootstrap from the final observation's stored value), the importance-weighted
squared TD loss summed over each sequence's steps, Adam (fused on a GPU) with gradient clipping, new priorities
``0.9 max|delta| + 0.1 mean|delta|`` returned by the step (the learner gives them back to the replay, its sample
source), and the target network copied every
``--target_update_period`` steps. Names and defaults follow SEED RL's R2D2 where it has them (README).
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Iterator, Mapping

import torch

from sfx.agents.base import Acted, ActingRule, Agent, Batch, FieldSpec, Stepped
from sfx.agents.kit import TargetNetwork, fused_adam, gradient_step
from sfx.agents.replay_store import (APPO_ONLY_FLAGS, add_learning_starts_flag, check_replay_disk, check_saved_replay,
                                     resolve_learning_starts)
from sfx.cfg.flag_types import add_bool_arg
from sfx.algo.qlearning import (actor_epsilons, double_q_targets, r2d2_loss, scale_rewards, sequence_priorities,
                                td_errors)
from sfx.errors import ConfigError

__all__ = ["R2D2", "EpsilonGreedy"]


class EpsilonGreedy(ActingRule):
    """Epsilon-greedy over the Q-values, one epsilon per actor (see the module docstring)."""

    truncation_field = "trunc_q"
    export_outputs = ("q_values",)

    def __init__(self, num_actions: int, base: float, alpha: float, eval_epsilon: float,
                 seed: int | None = None) -> None:
        self.num_actions = int(num_actions)
        self.base, self.alpha, self.eval_epsilon = float(base), float(alpha), float(eval_epsilon)
        self.epsilons: torch.Tensor | None = None  # per actor of this rank, after bind_actors
        self.generator = torch.Generator()
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(seed))
        self.fields = {"q_taken": FieldSpec(()), "q_max": FieldSpec(()), "trunc_q": FieldSpec(()),
                       "epsilon": FieldSpec(()), "actor_ids": FieldSpec((), torch.int64)}

    def bind_actors(self, first: int, total: int) -> None:
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


def add_r2d2_flags(g: argparse._ActionsContainer) -> None:
    """R2D2's flags, SEED RL's names and defaults where it has them."""
    g.add_argument("--burn_in", type=int, default=40,
                   help="steps of each sequence's prefix replayed only to warm up the recurrent state (no loss); "
                        "consecutive sequences of an actor overlap on them; < --rollout")
    g.add_argument("--n_step", type=int, default=5, help="n-step double-Q targets: rewards summed before bootstrapping")
    g.add_argument("--target_update_period", type=int, default=400,
                   help="the target network is a copy of the online one, renewed every this many learner steps")
    # every agent's replay flags count samples (agent steps): SEED's defaults of 1,000 and 10 sequences are
    # 80,000 and 800 samples at its --rollout of 80
    g.add_argument("--replay_ratio", type=float, default=1.5,
                   help="unit: trained samples per fresh sample: the average number of times each stored step is "
                        "trained on, whatever the sampling speed; > 0")
    g.add_argument("--replay_buffer_size", type=int, default=80_000,
                   help="unit: samples (trained steps) kept in the replay buffer, as sequences of --rollout steps "
                        "(each stored with its --burn_in prefix besides); SEED RL's 1,000 sequences of 80")
    add_learning_starts_flag(g, 800, "the first minibatch trains once the replay holds this many, in whole "
                                     "sequences of --rollout steps (SEED RL's minimum of 10 sequences of 80)")
    add_bool_arg(g, "save_replay_buffer", False,
                 "keep the replay buffer in every checkpoint (SB3's save_replay_buffer), so that a resumed run goes on "
                 "with its data instead of refilling it; the disk it needs is checked at start, a saved replay of "
                 "another size is refused. One rank only (with several, each rank's replay stays its own)")
    g.add_argument("--priority_exponent", type=float, default=0.9, help="alpha: sampling probability ~ priority^alpha")
    g.add_argument("--importance_sampling_exponent", type=float, default=0.6,
                   help="beta of the importance weights (N P(i))^-beta, normalised by the batch's largest")
    g.add_argument("--priority_eta", type=float, default=0.9,
                   help="a sequence's priority: eta max|td| + (1 - eta) mean|td| over its steps")
    g.add_argument("--value_function_rescaling_epsilon", type=float, default=1e-3,
                   help="eps of h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x, the rescaling of Q targets; > 0")
    g.add_argument("--epsilon_base", type=float, default=0.4,
                   help="actor i of N explores with epsilon_base^(1 + epsilon_alpha i / (N - 1))")
    g.add_argument("--epsilon_alpha", type=float, default=7.0, help="see --epsilon_base")
    g.add_argument("--eval_epsilon", type=float, default=1e-3, help="epsilon of evaluation and sfx.enjoy")
    # SEED RL's R2D2 values of the trainer's shared flags (they beat an env family's defaults; a command line
    # overrides them). No reward clipping (1e6, the mujoco family's "none"): R2D2 rescales its values with h
    # instead of clipping rewards (Kapturowski et al. 2019, section 2.3), so Atari's --reward_clip=1 is APPO's only
    g.set_defaults(gamma=0.997, max_grad_norm=40.0, adam_eps=1e-3, rollout=80, recurrence=80, batch_size=64 * 80,
                   reward_clip=1e6)


def validate_r2d2_cfg(cfg: Any) -> None:
    ints = {"n_step": 1, "target_update_period": 1, "replay_buffer_size": 1, "learning_starts": 0,
            "burn_in": 0}
    for name, low in ints.items():
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ConfigError(f"--{name}={value} must be an integer >= {low}")
    if cfg.burn_in >= cfg.rollout:
        raise ConfigError(f"--burn_in={cfg.burn_in} must be shorter than a sequence (--rollout={cfg.rollout}): "
                          f"the burn-in prefix comes from the actor's previous sequence")
    if not (cfg.replay_ratio > 0 and math.isfinite(cfg.replay_ratio)):
        raise ConfigError(f"--replay_ratio={cfg.replay_ratio} must be a finite number > 0 (trained steps per fresh "
                          f"step)")
    for name in ("priority_exponent", "importance_sampling_exponent", "priority_eta", "epsilon_base",
                 "eval_epsilon"):
        value = getattr(cfg, name)
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"--{name}={value} must be in [0, 1]")
    if not cfg.value_function_rescaling_epsilon > 0:
        raise ConfigError(f"--value_function_rescaling_epsilon={cfg.value_function_rescaling_epsilon} must be > 0")
    if not cfg.epsilon_alpha >= 0:
        raise ConfigError(f"--epsilon_alpha={cfg.epsilon_alpha} must be >= 0")
    if cfg.learning_starts > cfg.replay_buffer_size:
        raise ConfigError(f"--learning_starts={cfg.learning_starts} is more than the buffer holds "
                          f"(--replay_buffer_size={cfg.replay_buffer_size}): learning would never start")
    if cfg.batch_size % cfg.rollout:
        raise ConfigError(f"--batch_size={cfg.batch_size} must be a multiple of --rollout={cfg.rollout} "
                          f"(a minibatch is whole sequences)")


class R2D2(Agent):
    """See the module docstring."""

    name = "R2D2"
    lr_schedules = ("constant", "linear_decay")  # apply_params: every learning rate is its flag times lr_scale
    flag_group = "R2D2 (--algo=R2D2)"
    ignored_flags = APPO_ONLY_FLAGS
    ranks_refused = ("each rank would sample its own prioritized replay; not verified yet (run one rank, or "
                     "several independent seeds with sfx.runner)")

    @classmethod
    def add_flags(cls, parser: argparse._ActionsContainer) -> None:
        add_r2d2_flags(parser)

    @classmethod
    def check_flags(cls, cfg: Any, explicit: Any) -> None:
        resolve_learning_starts(cfg, explicit)  # --replay_buffer_min_size, the old spelling
        super().check_flags(cfg, explicit)

    @classmethod
    def validate(cls, cfg: Any) -> None:
        validate_r2d2_cfg(cfg)

    @staticmethod
    def sequences(cfg: Any, samples: int) -> int:
        """Sequences of ``--rollout`` steps that hold ``samples`` (the replay flags' unit), at least one."""
        return max(1, math.ceil(samples / cfg.rollout))

    @classmethod
    def sequences_per_minibatch(cls, cfg: Any) -> int:
        return max(1, cfg.batch_size // cfg.rollout)

    @classmethod
    def trajectories_per_iteration(cls, cfg: Any) -> int:
        # SEED's insertion batch: a minibatch's sequences / the replay ratio (one minibatch per iteration on average)
        return max(1, round(cls.sequences_per_minibatch(cfg) / cfg.replay_ratio))

    @classmethod
    def make_model(cls, cfg: Any, obs_space: Any, action_space: Any, num_tasks: int = 1) -> torch.nn.Module:
        from sfx.models.q_network import QNetwork

        return QNetwork(cfg, obs_space, action_space, num_tasks)

    @classmethod
    def acting_rule(cls, cfg: Any, action_space: Any) -> ActingRule:
        from sfx.models.q_network import discrete_actions

        return EpsilonGreedy(discrete_actions(action_space, cls.name), cfg.epsilon_base, cfg.epsilon_alpha,
                             cfg.eval_epsilon, seed=cfg.seed)

    @classmethod
    def host_memory_bytes(cls, cfg: Any, trajectory_bytes: int) -> int:
        from sfx.agents.replay_store import check_replay_memory

        # a stored sequence is a trajectory plus its burn-in prefix
        sequences = cls.sequences(cfg, cfg.replay_buffer_size)
        needed = int(sequences * trajectory_bytes * (cfg.rollout + cfg.burn_in) / cfg.rollout)
        check_replay_memory(needed, cfg.num_policies, f"--replay_buffer_size={cfg.replay_buffer_size} samples "
                                                      f"({sequences:,} sequences)")
        if cfg.save_replay_buffer:
            check_replay_disk(needed, cfg)
        return needed

    @classmethod
    def check_checkpoint(cls, cfg: Any, model: torch.nn.Module, checkpoint: Mapping[str, Any], where: str) -> None:
        super().check_checkpoint(cfg, model, checkpoint, where)
        if cfg.save_replay_buffer:
            check_saved_replay(checkpoint, cls.sequences(cfg, cfg.replay_buffer_size), "sequences", where)

    @classmethod
    def pbt_hyperparameters(cls, cfg: Any) -> dict[str, tuple[float, float]]:
        return {"learning_rate": (1e-6, 1e-2), "max_grad_norm": (1.0, 200.0)}

    def __init__(self, cfg: Any, model: torch.nn.Module, device: torch.device, group: Any = None) -> None:
        super().__init__(cfg, model, device, group)
        self.optimizer = fused_adam(model.parameters(), lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                    eps=cfg.adam_eps)
        self.target = TargetNetwork(model)
        self.updates = 0  # learner steps, for the target network's period
        self.store: Any = None

    def sample_source(self, fresh: Any) -> Any:
        from sfx.agents.sequence_replay import PrioritizedSequences

        cfg = self.cfg
        self.store = PrioritizedSequences(
            fresh, self.sequences(cfg, cfg.replay_buffer_size), cfg.burn_in,
            self.sequences(cfg, cfg.learning_starts) if cfg.learning_starts else 0, cfg.replay_ratio,
            lambda: self.sequences_per_minibatch(self.cfg), cfg.priority_exponent, cfg.importance_sampling_exponent,
            cfg.priority_eta, cfg.gamma, cfg.n_step, cfg.value_function_rescaling_epsilon, self.device, seed=cfg.seed,
            reward_scale=cfg.reward_scale, reward_clip=cfg.reward_clip)
        return self.store

    def minibatches(self, batch: Batch) -> Iterator[tuple[dict[str, Any], torch.Tensor]]:
        return self.store.minibatches(self.store.due(), lambda: self.sequences_per_minibatch(self.cfg))

    def step(self, mb: dict[str, Any], valids: torch.Tensor) -> Stepped:
        cfg, model, target = self.cfg, self.model, self.target.net
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
        state = {"optimizer": self.optimizer.state_dict(), "target_model": self.target.state_dict(),
                 "target_updates": self.updates}
        if self.cfg.save_replay_buffer and self.group is None and self.store is not None:
            state["replay"] = self.store.replay_state()
        return state

    def load_learning_state(self, state: Mapping[str, Any]) -> None:
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        # no target network saved: it starts as the loaded online weights
        self.target.load_state_dict(state.get("target_model"), self.model)
        self.updates = int(state.get("target_updates", self.updates))
        if self.cfg.save_replay_buffer and self.group is None and state.get("replay") is not None:
            self.store.load_replay_state(state["replay"], self.sequences(self.cfg, self.cfg.replay_buffer_size))

    def apply_params(self, params: Mapping[str, Any]) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = float(self.cfg.learning_rate) * self.lr_scale

    def current_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])
