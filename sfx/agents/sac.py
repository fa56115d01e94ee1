"""Soft Actor-Critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications": twin critics, a
learned temperature) with central inference as in SEED RL (Espeholt et al. 2020): ``--algo=SAC``.

Acting (the policy workers batch every actor's inference): the actor of :class:`~sfx.models.sac_model.SACModel`
gives a diagonal Gaussian, squashed by tanh onto the env's Box bounds (:class:`~sfx.algo.sac.SquashedGaussian`:
actions are never clipped, they lie inside by construction). Training actors sample it; evaluation,
``sfx.enjoy`` and export take the squashed mean. The slots keep the final observation of a time-limit step.

Learning: fresh trajectories go to a uniform transition replay (:mod:`sfx.agents.transition_replay`);
``--replay_ratio`` trained transitions per env step (gradient steps of ``--batch_size`` transitions each: the
default 256 is one gradient step per env step, SB3's) once ``--learning_starts`` transitions are stored, whatever
the sampling speed. A step (the paper's Algorithm 1):

1. critics: ``y = r + gamma^h (min_i Q'_i(s', a') - alpha log pi(a'|s'))``, ``a' ~ pi(.|s')`` (terminations cut
   the bootstrap; at a time limit ``s'`` is the stored final observation; n-step windows with ``--n_step``; ``r``:
   each step's reward scaled and clipped as APPO's, ``--reward_scale`` then ``--reward_clip``),
   ``J_Q = 1/2 (Q_i(s, a) - y)^2`` for each critic, one Adam step (``--critic_learning_rate``);
2. actor: ``J_pi = alpha log pi(a|s) - min_i Q_i(s, a)`` with ``a`` reparameterised (a shared image encoder
   is read detached), Adam (``--actor_learning_rate``);
3. temperature (unless fixed by ``--sac_alpha``): ``-log_alpha (log pi + H_bar)``, ``H_bar = --target_entropy``
   (default ``-dim(A)``), Adam (``--alpha_learning_rate``);
4. target critics: ``Q' <- tau Q + (1 - tau) Q'`` (``--tau``).

Units: the learner works on the squashed actions in ``[-1, 1]`` (the actor's ``tanh(u)``): critics take them
as input, and ``log pi``, the entropy and its target are densities there, as in the SAC authors' code and SB3
(both rescale the env's actions to ``[-1, 1]``). The replay keeps env actions (what the envs were given),
mapped to ``[-1, 1]`` when drawn; only acting scales onto the env's bounds. So an env whose bounds are
``[-3, 3]`` learns as one whose bounds are ``[-1, 1]``: the default target entropy ``-dim(A)`` does not
depend on the env's units (in env units it would ask ``log 3`` nats less per dimension there).

Ranks (torch.distributed): each rank keeps its own replay of its own actors' transitions; every gradient step
averages the ranks' gradients (one minibatch of ``--batch_size`` per rank), and the ranks agree on the number of
steps per iteration (the mean of what each one's replay ratio asks), so ``--replay_ratio`` counts trained
transitions per env step of one rank.

The math is :mod:`sfx.algo.sac`'s; names and defaults follow the SAC paper and Stable-Baselines3 (README).
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Iterator, Mapping

import torch

from sfx.agents.base import Acted, ActingRule, Agent, Batch
from sfx.agents.kit import TargetNetwork, fused_adam, gradient_step
from sfx.agents.replay_store import (APPO_ONLY_FLAGS, add_learning_starts_flag, check_replay_disk, check_saved_replay,
                                     resolve_learning_starts)
from sfx.algo.sac import (SquashedGaussian, actor_loss, clipped_double_q_target, critic_loss, default_target_entropy,
                          temperature_loss)
from sfx.cfg.flag_types import add_bool_arg
from sfx.errors import ConfigError

__all__ = ["SAC", "SquashedGaussianActing"]


class SquashedGaussianActing(ActingRule):
    """Samples the squashed Gaussian while training; its squashed mean for evaluation, enjoy and export.

    ``random_steps``: a training policy worker's first ``random_steps`` acted rows are uniform over the Box
    instead (the warm-up of ``--random_warmup``: the replay's first ``--learning_starts`` transitions, spread
    over the policy's workers); counted from :meth:`bind_actors`, so evaluation and enjoy never act at random.
    """

    stores_final_obs = True
    export_outputs = ("action_mean", "action_log_std")

    def __init__(self, low: Any, high: Any, seed: int | None = None, random_steps: int = 0) -> None:
        self.low = torch.as_tensor(low, dtype=torch.float32).reshape(-1)
        self.high = torch.as_tensor(high, dtype=torch.float32).reshape(-1)
        self.random_steps = int(random_steps)
        self.random_left = 0  # rows still to act uniformly (set by bind_actors: training policy workers only)
        self.fields = {}
        self.generator = torch.Generator()
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(seed))

    def _dist(self, out: Mapping[str, torch.Tensor]) -> SquashedGaussian:
        mean = out["action_mean"]
        return SquashedGaussian(mean, out["action_log_std"], self.low.to(mean.device), self.high.to(mean.device),
                                validate_args=False)

    def bind_actors(self, first: int, total: int) -> None:
        self.random_left = self.random_steps

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


def add_sac_flags(g: argparse._ActionsContainer) -> None:
    """SAC's flags: the SAC paper's / Stable-Baselines3's names and defaults."""
    g.add_argument("--tau", type=float, default=0.005,
                   help="Polyak averaging of the target critics: Q' <- tau Q + (1 - tau) Q' after each gradient step; "
                        "in [0, 1] (SEED RL's --polyak is 1 - tau)")
    g.add_argument("--sac_alpha", type=float, default=None,
                   help="a fixed entropy temperature alpha >= 0; default (None): learned towards --target_entropy")
    g.add_argument("--initial_alpha", type=float, default=1.0,
                   help="the learned temperature's starting value (> 0); SB3's ent_coef='auto' starts at 1.0")
    g.add_argument("--target_entropy", type=float, default=None,
                   help="H_bar, the entropy the learned temperature aims at; default (None): -dim(action space)")
    add_learning_starts_flag(g, 100, "the first gradient step waits for this many transitions (SB3's default)")
    add_bool_arg(g, "random_warmup", True,
                 "the first --learning_starts env steps act uniformly at random over the action space's bounds "
                 "(SB3's warm-up), not with the untrained actor; False: the actor from the first step")
    g.add_argument("--replay_ratio", type=float, default=256.0,
                   help="unit: trained samples (transitions) per fresh sample (env step), held whatever the sampling "
                        "speed; > 0. Gradient steps per env step are replay_ratio / --batch_size (the default 256 at "
                        "--batch_size=256: one, SB3's gradient_steps / train_freq)")
    g.add_argument("--replay_buffer_size", type=int, default=1_000_000,
                   help="unit: samples (transitions) kept in the replay (uniform sampling); checked at start against "
                        "free memory")
    add_bool_arg(g, "save_replay_buffer", False,
                 "keep the replay buffer in every checkpoint (SB3's save_replay_buffer), so that a resumed run goes on "
                 "with its data instead of refilling it; the disk it needs is checked at start, a saved replay of "
                 "another size is refused. One rank only (with several, each rank's replay stays its own)")
    g.add_argument("--n_step", type=int, default=1,
                   help="n-step targets: rewards of n steps summed before bootstrapping (1: the paper's)")
    g.add_argument("--actor_learning_rate", type=float, default=3e-4, help="Adam learning rate of the actor")
    g.add_argument("--critic_learning_rate", type=float, default=3e-4, help="Adam learning rate of the twin critics")
    g.add_argument("--alpha_learning_rate", type=float, default=3e-4,
                   help="Adam learning rate of log(alpha), the learned temperature")
    # the paper's values of the trainer's shared flags (they beat an env family's defaults, which are APPO's; a
    # command line overrides them): 256x256 ReLU networks, no input normalisation, PyTorch's nn.Linear
    # initialisation (SB3's), no core (SAC replays single transitions). Short trajectories and one learner
    # iteration's worth of queued slots: at a replay ratio the learner sets the pace and the actors wait for
    # slots, so every queued step is policy lag, not throughput. No reward clipping (1e6, the mujoco family's
    # "none"), as the paper and SB3: a family's --reward_clip for APPO (gym's 10) would cut Pendulum's rewards
    g.set_defaults(gamma=0.99, batch_size=256, use_rnn=False, hidden_size=256, nonlinearity="relu",
                   normalize_input=False, policy_initialization="torch_default", rollout=8,
                   traj_buffers_excess_ratio=1.0, reward_clip=1e6)


def validate_sac_cfg(cfg: Any) -> None:
    for name, low in {"n_step": 1, "replay_buffer_size": 1, "learning_starts": 0}.items():
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ConfigError(f"--{name}={value} must be an integer >= {low}")
    if not (cfg.replay_ratio > 0 and math.isfinite(cfg.replay_ratio)):
        raise ConfigError(f"--replay_ratio={cfg.replay_ratio} must be a finite number > 0 (trained samples per "
                          f"fresh sample)")
    if not 0.0 <= cfg.tau <= 1.0:
        raise ConfigError(f"--tau={cfg.tau} must be in [0, 1]")
    if cfg.sac_alpha is not None and not (cfg.sac_alpha >= 0 and math.isfinite(cfg.sac_alpha)):
        raise ConfigError(f"--sac_alpha={cfg.sac_alpha} must be a finite number >= 0 (or None: learned)")
    if not (cfg.initial_alpha > 0 and math.isfinite(cfg.initial_alpha)):
        raise ConfigError(f"--initial_alpha={cfg.initial_alpha} must be a finite number > 0")
    if cfg.target_entropy is not None and not math.isfinite(cfg.target_entropy):
        raise ConfigError(f"--target_entropy={cfg.target_entropy} must be finite (or None: -dim(A))")
    for name in ("actor_learning_rate", "critic_learning_rate", "alpha_learning_rate"):
        value = getattr(cfg, name)
        if not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"--{name}={value} must be a finite number > 0")
    if cfg.batch_size < 1:
        raise ConfigError(f"--batch_size={cfg.batch_size} must be >= 1 (transitions per gradient step)")


class SAC(Agent):
    """See the module docstring."""

    name = "SAC"
    lr_schedules = ("constant", "linear_decay")  # apply_params: every learning rate is its flag times lr_scale
    flag_group = "SAC (--algo=SAC)"
    ignored_flags = {
        **APPO_ONLY_FLAGS,
        "learning_rate": "SAC has one per network: --actor_learning_rate, --critic_learning_rate, "
                         "--alpha_learning_rate",
        "adam_eps": "SAC's optimizers keep Adam's epsilon (1e-8, SB3's)",
        "max_grad_norm": "SAC clips no gradients (the paper's and SB3's)",
        **{k: "SAC learns from single transitions, without a recurrent core"
           for k in ("recurrence", "rnn_type", "rnn_num_layers")},
    }
    batch_of_trajectories = False  # --batch_size transitions drawn one by one
    learner_sets_the_pace = True  # sampling waits on --replay_ratio: the learner gets every core (CPU)

    @classmethod
    def add_flags(cls, parser: argparse._ActionsContainer) -> None:
        add_sac_flags(parser)

    @classmethod
    def check_flags(cls, cfg: Any, explicit: Any) -> None:
        if cfg.use_rnn:  # before the shared checks, whose --recurrence check would speak of other flags
            raise ConfigError(f"--use_rnn={cfg.use_rnn} is not supported by --algo=SAC (it learns from single "
                              f"replayed transitions, without a recurrent state); allowed: --use_rnn=False")
        resolve_learning_starts(cfg, explicit)  # --replay_buffer_min_size, the old spelling
        super().check_flags(cfg, explicit)

    @classmethod
    def validate(cls, cfg: Any) -> None:
        validate_sac_cfg(cfg)

    @classmethod
    def trajectories_per_iteration(cls, cfg: Any) -> int:
        # one trajectory of each env (a minibatch's worth at most): small iterations, so that the learner
        # publishes its weights often and the actors, throttled by the few slots the learner leaves them
        # (--traj_buffers_excess_ratio 1), act with weights a few dozen gradient steps old, not hundreds
        envs = cfg.num_workers * cfg.num_envs_per_worker
        return max(1, min(cfg.batch_size // cfg.rollout, envs))

    @classmethod
    def make_model(cls, cfg: Any, obs_space: Any, action_space: Any, num_tasks: int = 1) -> torch.nn.Module:
        from sfx.models.sac_model import SACModel

        return SACModel(cfg, obs_space, action_space, num_tasks)

    @classmethod
    def acting_rule(cls, cfg: Any, action_space: Any) -> ActingRule:
        from sfx.models.sac_model import box_actions

        box_actions(action_space, cls.name)
        # the warm-up's rows, shared by the policy's workers (each serves about an equal share of the actors' steps)
        actors = 1 if cfg.inference == "learner" else max(1, cfg.policy_workers_per_policy)  # acting forward passes
        random_steps = math.ceil(cfg.learning_starts / actors) \
            if cfg.random_warmup else 0
        return SquashedGaussianActing(action_space.low, action_space.high, seed=cfg.seed, random_steps=random_steps)

    @classmethod
    def host_memory_bytes(cls, cfg: Any, trajectory_bytes: int) -> int:
        from sfx.agents.replay_store import check_replay_memory
        from sfx.agents.transition_replay import rows_for

        # a stored row is a trajectory slot (its final observations go to a ring of one per row): an upper bound
        needed = rows_for(cfg.replay_buffer_size, cfg.rollout) * trajectory_bytes
        check_replay_memory(needed, cfg.num_policies, f"--replay_buffer_size={cfg.replay_buffer_size} transitions")
        if cfg.save_replay_buffer:
            check_replay_disk(needed, cfg)
        return needed

    @classmethod
    def check_checkpoint(cls, cfg: Any, model: torch.nn.Module, checkpoint: Mapping[str, Any], where: str) -> None:
        from sfx.agents.transition_replay import rows_for

        super().check_checkpoint(cfg, model, checkpoint, where)
        if cfg.save_replay_buffer:
            check_saved_replay(checkpoint, rows_for(cfg.replay_buffer_size, cfg.rollout), f"rows of {cfg.rollout}",
                               where)

    @classmethod
    def pbt_hyperparameters(cls, cfg: Any) -> dict[str, tuple[float, float]]:
        return {"actor_learning_rate": (1e-6, 1e-2), "critic_learning_rate": (1e-6, 1e-2)}

    def __init__(self, cfg: Any, model: torch.nn.Module, device: torch.device, group: Any = None) -> None:
        super().__init__(cfg, model, device, group)
        # fused on the CPU too: 0.3 ms per step for the three optimizers on one core against 1.3 ms for the
        # per-tensor loop, at one gradient step per env step
        adam = dict(betas=(cfg.adam_beta1, cfg.adam_beta2), fused_on_cpu=True)
        self.actor_optimizer = fused_adam(model.actor.parameters(), lr=cfg.actor_learning_rate, **adam)
        self.critic_optimizer = fused_adam(model.critic.parameters(), lr=cfg.critic_learning_rate, **adam)
        self.log_alpha = torch.tensor(math.log(cfg.initial_alpha), device=device, requires_grad=True)
        self.alpha_optimizer = fused_adam([self.log_alpha], lr=cfg.alpha_learning_rate, **adam)
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
        if self.cfg.sac_alpha is not None:
            return torch.tensor(float(self.cfg.sac_alpha), device=self.device)
        return self.log_alpha.detach().exp()

    def sample_source(self, fresh: Any) -> Any:
        from sfx.agents.transition_replay import TransitionReplay

        cfg = self.cfg
        self.store = TransitionReplay(fresh, cfg.replay_buffer_size, cfg.learning_starts, cfg.replay_ratio, cfg.gamma,
                                      cfg.n_step, self.device, seed=cfg.seed, reward_scale=cfg.reward_scale,
                                      reward_clip=cfg.reward_clip)
        return self.store

    def minibatches(self, batch: Batch) -> Iterator[tuple[dict[str, Any], torch.Tensor]]:
        return self.store.minibatches(self.gradient_steps_due(), self.cfg.batch_size)

    def gradient_steps_due(self) -> int:
        """The iteration's gradient steps: the replay ratio's (:meth:`TransitionReplay.due`); with ranks, the
        ranks' mean, so that every rank takes part in each step's all-reduce (none until every rank's replay
        holds something); each rank's credit keeps its difference from it."""
        m = self.cfg.batch_size
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
        cfg, model = self.cfg, self.model
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
        return {"actor_optimizer": self.actor_optimizer.state_dict(),
                "critic_optimizer": self.critic_optimizer.state_dict(),
                "alpha_optimizer": self.alpha_optimizer.state_dict(),
                "target_critic": self.target_critic.state_dict(), "log_alpha": self.log_alpha.detach().clone(),
                **({"replay": self.store.replay_state()}
                   if self.cfg.save_replay_buffer and self.group is None and self.store is not None else {})}

    def load_learning_state(self, state: Mapping[str, Any]) -> None:
        for key, opt in (("actor_optimizer", self.actor_optimizer), ("critic_optimizer", self.critic_optimizer),
                         ("alpha_optimizer", self.alpha_optimizer)):
            if key in state:
                opt.load_state_dict(state[key])
        # no target saved: it starts as the loaded online critics
        self.target_critic.load_state_dict(state.get("target_critic"), self.model.critic)
        if "log_alpha" in state:
            with torch.no_grad():
                self.log_alpha.copy_(torch.as_tensor(state["log_alpha"]).to(self.log_alpha.device))
        if self.cfg.save_replay_buffer and self.group is None and state.get("replay") is not None:
            from sfx.agents.transition_replay import rows_for

            self.store.load_replay_state(state["replay"], rows_for(self.cfg.replay_buffer_size, self.cfg.rollout))

    def apply_params(self, params: Mapping[str, Any]) -> None:
        for opt, name in ((self.actor_optimizer, "actor_learning_rate"),
                          (self.critic_optimizer, "critic_learning_rate"),
                          (self.alpha_optimizer, "alpha_learning_rate")):
            for group in opt.param_groups:
                group["lr"] = float(getattr(self.cfg, name)) * self.lr_scale

    def current_lr(self) -> float:
        return float(self.critic_optimizer.param_groups[0]["lr"])
