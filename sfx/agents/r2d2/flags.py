"""R2D2's flags (SEED RL's names and defaults where it has them), their validation, and :class:`R2D2Config`."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from sfx.agents.base import trajectories_per_batch
from sfx.agents.kit.checks import (add_learning_starts_flag, add_save_replay_buffer_flag, check_integer_flags,
                                   check_replay_ratio)
from sfx.errors import ConfigError

__all__ = ["R2D2Config", "add_r2d2_flags", "sequences", "validate_r2d2_cfg"]


@dataclass(frozen=True)
class R2D2Config:
    """What R2D2's learning step reads, typed: built from cfg when a learner starts and when new hyperparameters
    come in (PBT, a resumed run's flags)."""

    burn_in: int
    gamma: float
    n_step: int
    value_function_rescaling_epsilon: float
    reward_scale: float
    reward_clip: float
    max_grad_norm: float
    priority_eta: float
    target_update_period: int
    sequences_per_minibatch: int

    @classmethod
    def from_cfg(cls, cfg: Any) -> R2D2Config:
        return cls(burn_in=cfg.burn_in, gamma=cfg.gamma, n_step=cfg.n_step,
                   value_function_rescaling_epsilon=cfg.value_function_rescaling_epsilon,
                   reward_scale=cfg.reward_scale, reward_clip=cfg.reward_clip, max_grad_norm=cfg.max_grad_norm,
                   priority_eta=cfg.priority_eta, target_update_period=cfg.target_update_period,
                   sequences_per_minibatch=trajectories_per_batch(cfg))


def sequences(cfg: Any, samples: int) -> int:
    """Sequences of ``--rollout`` steps that hold ``samples`` (the replay flags' unit), at least one."""
    return max(1, math.ceil(samples / cfg.rollout))


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
    add_save_replay_buffer_flag(g)
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
    """:class:`~sfx.errors.ConfigError` (one line) on a bad value of R2D2's flags."""
    check_integer_flags(cfg, {"n_step": 1, "target_update_period": 1, "replay_buffer_size": 1, "learning_starts": 0,
                              "burn_in": 0})
    if cfg.burn_in >= cfg.rollout:
        raise ConfigError(f"--burn_in={cfg.burn_in} must be shorter than a sequence (--rollout={cfg.rollout}): "
                          f"the burn-in prefix comes from the actor's previous sequence")
    check_replay_ratio(cfg)
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
