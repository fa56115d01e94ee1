"""The flags of the actor-critic model (:func:`sfx.models.create_actor_critic`), the model the base
:class:`~sfx.agents.base.Agent` builds: APPO's, and that of an agent of your own on the default model. An agent
with another model (R2D2's Q-network, SAC's actor and critics) declares none of them, so given with it they are
refused as another agent's flags. Parts whose training is the agent's (PopArt's statistics, the auxiliary heads'
losses) are APPO's; another agent on this model refuses a model that has them (its ``check_model``).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from sfx.cfg.flag_types import add_bool_arg
from sfx.errors import ConfigError

__all__ = ["add_actor_critic_flags", "validate_actor_critic_flags"]


def add_actor_critic_flags(g: argparse._ActionsContainer) -> None:
    """The actor-critic's flags: its auxiliary heads, the actor / critic layout, the Gaussian's stddev, the value
    head's normalisation (returns or PopArt)."""
    # Brain Agent's self-supervised auxiliary losses (image observations with a built-in conv/resnet encoder)
    g.add_argument("--aux_loss_reconstruction_coeff", type=float, default=0.0,
                   help="coefficient of the frame reconstruction loss (a decoder mirroring the encoder; MSE on frames "
                        "scaled to [-1, 1]); 0 = off, Brain Agent: 0.01")
    g.add_argument("--aux_loss_future_pred_coeff", type=float, default=0.0,
                   help="coefficient of the future-frame prediction loss (the core's output rolled forward with the "
                        "actions taken, predicting frames up to --aux_loss_future_pred_horizon steps ahead within "
                        "the episode); 0 = off, Brain Agent: 1.0")
    g.add_argument("--aux_loss_future_pred_horizon", type=int, default=10,
                   help="future prediction: the farthest step predicted")
    add_bool_arg(g, "actor_critic_share_weights", True,
                 "actor and critic share one encoder and core; False = two separate networks, each with its own "
                 "encoder and core (with an RNN the recurrent state holds both cores' states)")
    add_bool_arg(g, "adaptive_stddev", True,
                 "continuous (Box) actions: the stddev is an output of the action head (state-dependent); False = "
                 "one learned stddev per action dimension, independent of the observation. Discrete actions "
                 "ignore it")
    g.add_argument("--initial_stddev", type=float, default=1.0,
                   help="with --adaptive_stddev=False: the learned stddev's initial value (continuous actions only)")
    add_bool_arg(g, "normalize_returns", True, "train the value head on normalized returns")
    add_bool_arg(g, "popart", False,
                 "PopArt (Hessel et al. 2019): one value output per task (an env with several tasks, e.g. "
                 "--env=multitask or dmlab_30; one task works too), each trained on targets normalised by its "
                 "task's running mean and stddev, the policy-gradient advantages divided by that stddev, and "
                 "the head rescaled after every step so each value's deviation from its task's mean does not "
                 "change (the values follow the move of the mean; --popart_preserve_mean). Replaces "
                 "--normalize_returns. Off by default: it needs tasks of different reward scales to pay off")
    g.add_argument("--popart_beta", type=float, default=3e-4,
                   help="with --popart: step size, per trajectory (Brain Agent's rate), of each task's running mean "
                        "and second moment of the targets: n trajectories of a task in a minibatch move them "
                        "1-(1-beta)^n of the way; a task's first minibatch sets them, before its loss")
    add_bool_arg(g, "popart_preserve_mean", False,
                 "with --popart: the papers' exact output preservation, the head's unnormalised values unchanged "
                 "by a move of the task's mean too; False (default): they follow it, so bootstrapped values track "
                 "their targets' level as with --normalize_returns, which learned faster "
                 "(docs/appendix/agents_flag_notes.md)")
    g.add_argument("--popart_clip_min", type=float, default=1e-4,
                   help="with --popart: the per-task stddev is never below this")


def validate_actor_critic_flags(cfg: Any) -> None:
    """:class:`~sfx.errors.ConfigError` (one line) on a bad value of the actor-critic's flags."""
    if not 0.0 < cfg.initial_stddev < math.inf:
        raise ConfigError(f"--initial_stddev={cfg.initial_stddev} must be a finite number > 0")
    if not 0.0 < cfg.popart_beta <= 1.0:
        raise ConfigError(f"--popart_beta={cfg.popart_beta} must be in (0, 1]")
    if not 0.0 < cfg.popart_clip_min < math.inf:
        raise ConfigError(f"--popart_clip_min={cfg.popart_clip_min} must be a finite number > 0")
    for name in ("aux_loss_reconstruction_coeff", "aux_loss_future_pred_coeff"):
        value = getattr(cfg, name)
        if not (value >= 0 and math.isfinite(value)):
            raise ConfigError(f"--{name}={value} must be a finite number >= 0 (0 = off)")
    if cfg.aux_loss_future_pred_horizon < 1:
        raise ConfigError(f"--aux_loss_future_pred_horizon={cfg.aux_loss_future_pred_horizon} must be >= 1")
