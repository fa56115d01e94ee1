"""SAC's flags (the SAC paper's / Stable-Baselines3's names and defaults), their validation, and
:class:`SACConfig`."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from sfx.agents.kit.checks import (add_learning_starts_flag, add_save_replay_buffer_flag, check_integer_flags,
                                   check_replay_ratio)
from sfx.cfg.flag_types import add_bool_arg
from sfx.errors import ConfigError

__all__ = ["SACConfig", "add_sac_flags", "validate_sac_cfg"]


@dataclass(frozen=True)
class SACConfig:
    """What SAC's learning step reads, typed: built from cfg when a learner starts and when new hyperparameters
    come in (PBT, a resumed run's flags)."""

    gamma: float
    tau: float
    sac_alpha: float | None  # None: learned
    batch_size: int

    @classmethod
    def from_cfg(cls, cfg: Any) -> SACConfig:
        return cls(gamma=cfg.gamma, tau=cfg.tau, sac_alpha=None if cfg.sac_alpha is None else float(cfg.sac_alpha),
                   batch_size=cfg.batch_size)


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
    add_save_replay_buffer_flag(g)
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
    """:class:`~sfx.errors.ConfigError` (one line) on a bad value of SAC's flags."""
    check_integer_flags(cfg, {"n_step": 1, "replay_buffer_size": 1, "learning_starts": 0})
    check_replay_ratio(cfg)
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
