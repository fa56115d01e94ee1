"""Soft Actor-Critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications": twin critics, a
learned temperature) with central inference as in SEED RL (Espeholt et al. 2020): ``--algo=SAC``.

Acting (the policy workers batch every actor's inference): the actor of :class:`~sfx.models.sac_model.SACModel`
gives a diagonal Gaussian, squashed by tanh onto the env's Box bounds (:class:`~sfx.algo.sac.SquashedGaussian`:
actions are never clipped, they lie inside by construction). Training actors sample it; evaluation,
``sfx.enjoy`` and export take the squashed mean. The slots keep the final observation of a time-limit step.

Learning: fresh trajectories go to a uniform transition replay (:mod:`sfx.agents.kit.transition_replay`);
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

The math is :mod:`sfx.algo.sac`'s; names and defaults follow the SAC paper and Stable-Baselines3.
"""

from __future__ import annotations

import argparse
from typing import Any, Mapping

import torch

from sfx.agents.base import ActingRule, trajectories_per_batch
from sfx.agents.kit.checks import (REPLAY_AGENTS_IGNORE, check_replay_disk, check_replay_memory, check_saved_replay,
                                   resolve_learning_starts)
from sfx.agents.kit.transition_replay import rows_for
from sfx.agents.sac.acting import SquashedGaussianActing
from sfx.agents.sac.flags import add_sac_flags, validate_sac_cfg
from sfx.agents.sac.learning import SACLearning
from sfx.errors import ConfigError

__all__ = ["SAC"]


class SAC(SACLearning):
    """See the module docstring."""

    name = "SAC"
    lr_schedules = ("constant", "linear_decay")  # apply_params: every learning rate is its flag times lr_scale
    flag_group = "SAC (--algo=SAC)"
    ignored_flags = {
        **REPLAY_AGENTS_IGNORE,
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
    def add_model_flags(cls, parser: argparse._ActionsContainer) -> None:
        """Its network reads only the trainer's shared model flags (encoder, core, widths)."""

    @classmethod
    def validate_model_flags(cls, cfg: Any) -> None:
        """No model flags of its own to check."""

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
        return min(trajectories_per_batch(cfg), envs)

    @classmethod
    def make_model(cls, cfg: Any, obs_space: Any, action_space: Any, num_tasks: int = 1) -> torch.nn.Module:
        from sfx.models.sac_model import SACModel

        return SACModel(cfg, obs_space, action_space, num_tasks)

    @classmethod
    def acting_rule(cls, cfg: Any, action_space: Any) -> ActingRule:
        from sfx.models.sac_model import box_actions

        box_actions(action_space, cls.name)
        # the warm-up's rows: the acting processes that share them are the engine's to say (bind_actors)
        random_steps = cfg.learning_starts if cfg.random_warmup else 0
        return SquashedGaussianActing(action_space.low, action_space.high, seed=cfg.seed, random_steps=random_steps)

    @classmethod
    def host_memory_bytes(cls, cfg: Any, trajectory_bytes: int) -> int:
        # a stored row is a trajectory slot (its final observations go to a ring of one per row): an upper bound
        needed = rows_for(cfg.replay_buffer_size, cfg.rollout) * trajectory_bytes
        check_replay_memory(needed, cfg.num_policies, f"--replay_buffer_size={cfg.replay_buffer_size} transitions")
        if cfg.save_replay_buffer:
            check_replay_disk(needed, cfg)
        return needed

    @classmethod
    def check_checkpoint(cls, cfg: Any, model: torch.nn.Module, checkpoint: Mapping[str, Any], where: str) -> None:
        super().check_checkpoint(cfg, model, checkpoint, where)
        if cfg.save_replay_buffer:
            check_saved_replay(checkpoint, rows_for(cfg.replay_buffer_size, cfg.rollout), f"rows of {cfg.rollout}",
                               where)

    @classmethod
    def pbt_hyperparameters(cls, cfg: Any) -> dict[str, tuple[float, float]]:
        return {"actor_learning_rate": (1e-6, 1e-2), "critic_learning_rate": (1e-6, 1e-2)}
