"""R2D2 (Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed Reinforcement Learning"), with
central inference as in SEED RL (Espeholt et al. 2020): ``--algo=R2D2``.

Acting (the policy workers batch every actor's inference): a dueling recurrent Q-network
(:class:`~sfx.models.q_network.QNetwork`, any encoder, no core / GRU / LSTM); actor ``i`` of ``N`` acts
epsilon-greedily with ``epsilon_i = base^(1 + alpha i / (N - 1))`` (Ape-X; base 0.4, alpha 7), evaluation
and ``sfx.enjoy`` with ``--eval_epsilon``. It stores per step the action's Q-value, the greedy Q-value
(initial priorities), its epsilon and actor id, and for a time-limit step the greedy Q-value of the final
observation (bootstrapped from).

Learning: fresh trajectories become overlapping sequences with a burn-in prefix in a prioritized replay
(:mod:`sfx.agents.kit.sequence_replay`); ``--replay_ratio`` decides how many minibatches each iteration trains.
A step: burn-in of the online and target networks from the stored state (no gradient), Q-values over the
trained steps, n-step double-Q targets with value rescaling on the rewards scaled and clipped as APPO's
(``--reward_scale``, ``--reward_clip``) (:mod:`sfx.algo.qlearning`; terminations cut
the bootstrap, truncations bootstrap from the final observation's stored value), the importance-weighted
squared TD loss summed over each sequence's steps, Adam (fused on a GPU) with gradient clipping, new priorities
``0.9 max|delta| + 0.1 mean|delta|`` returned by the step (the learner gives them back to the replay, its sample
source), and the target network copied every
``--target_update_period`` steps. Names and defaults follow SEED RL's R2D2 where it has them.
"""

from __future__ import annotations

import argparse
from typing import Any, Mapping

import torch

from sfx.agents.base import ActingRule, trajectories_per_batch
from sfx.agents.kit.checks import (REPLAY_AGENTS_IGNORE, check_replay_disk, check_replay_memory, check_saved_replay,
                                   resolve_learning_starts)
from sfx.agents.r2d2.acting import EpsilonGreedy
from sfx.agents.r2d2.flags import add_r2d2_flags, sequences, validate_r2d2_cfg
from sfx.agents.r2d2.learning import R2D2Learning

__all__ = ["R2D2"]


class R2D2(R2D2Learning):
    """See the module docstring."""

    name = "R2D2"
    lr_schedules = ("constant", "linear_decay")  # apply_params: every learning rate is its flag times lr_scale
    flag_group = "R2D2 (--algo=R2D2)"
    ignored_flags = REPLAY_AGENTS_IGNORE
    ranks_refused = ("each rank would sample its own prioritized replay; not verified yet (run one rank, or "
                     "several independent seeds with sfx.runner)")

    @classmethod
    def add_model_flags(cls, parser: argparse._ActionsContainer) -> None:
        """Its network reads only the trainer's shared model flags (encoder, core, widths)."""

    @classmethod
    def validate_model_flags(cls, cfg: Any) -> None:
        """No model flags of its own to check."""

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

    @classmethod
    def trajectories_per_iteration(cls, cfg: Any) -> int:
        # SEED's insertion batch: a minibatch's sequences / the replay ratio (one minibatch per iteration on average)
        return max(1, round(trajectories_per_batch(cfg) / cfg.replay_ratio))

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
        # a stored sequence is a trajectory plus its burn-in prefix
        stored = sequences(cfg, cfg.replay_buffer_size)
        needed = int(stored * trajectory_bytes * (cfg.rollout + cfg.burn_in) / cfg.rollout)
        check_replay_memory(needed, cfg.num_policies, f"--replay_buffer_size={cfg.replay_buffer_size} samples "
                                                      f"({stored:,} sequences)")
        if cfg.save_replay_buffer:
            check_replay_disk(needed, cfg)
        return needed

    @classmethod
    def check_checkpoint(cls, cfg: Any, model: torch.nn.Module, checkpoint: Mapping[str, Any], where: str) -> None:
        super().check_checkpoint(cfg, model, checkpoint, where)
        if cfg.save_replay_buffer:
            check_saved_replay(checkpoint, sequences(cfg, cfg.replay_buffer_size), "sequences", where)

    @classmethod
    def pbt_hyperparameters(cls, cfg: Any) -> dict[str, tuple[float, float]]:
        return {"learning_rate": (1e-6, 1e-2), "max_grad_norm": (1.0, 200.0)}
