"""APPO (asynchronous PPO with V-trace; Sample Factory's algorithm), sfx's default agent: its declarations.

Acting (:mod:`sfx.agents.appo.acting`): sample an action from the policy head's distribution and store its
log-prob, the distribution's parameters and the value (and the value of a time-limit step's final observation, to
bootstrap from). Learning (:mod:`sfx.agents.appo.learning`): each iteration takes ``--num_batches_per_iteration``
minibatches of ``--batch_size`` samples, ``--ppo_epochs`` passes over them in random order, one
:func:`~sfx.agents.appo.learning.learning_step` each. Flags and the typed config: :mod:`sfx.agents.appo.flags`.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

from sfx.agents.appo.acting import APPOActingRule
from sfx.agents.appo.flags import (add_appo_flags, check_vmpo_kl_bounds, minibatch_unit, replay_needs_features,
                                   replay_specs, trajectories_per_iteration, validate_appo_cfg)
from sfx.agents.appo.learning import APPOLearning
from sfx.agents.base import ActingRule
from sfx.algo.schedules import LR_SCHEDULES
from sfx.errors import ConfigError

__all__ = ["APPO"]


class APPO(APPOLearning):
    """Asynchronous PPO with V-trace (or GAE): see the module docstring."""

    name = "APPO"
    # apply_params: every learning rate is its flag times lr_scale; step runs the KL-adaptive schedules
    lr_schedules = LR_SCHEDULES
    flag_group = "APPO (--algo=APPO)"

    @classmethod
    def add_flags(cls, parser: argparse._ActionsContainer) -> None:
        add_appo_flags(parser)

    @classmethod
    def validate(cls, cfg: Any) -> None:
        validate_appo_cfg(cfg)

    @classmethod
    def trajectories_per_iteration(cls, cfg: Any) -> int:
        return trajectories_per_iteration(cfg)

    @classmethod
    def batches_ahead(cls, cfg: Any) -> int:
        # One batch ahead (policy lag ~1 when the learner sets the pace) for every estimator: GAE's targets take
        # the samples as on-policy, and V-trace corrects the policy gradient for lag but not the core's state or
        # memory stored at acting time (docs/appendix/agents_flag_notes.md, "APPO: one batch ahead")
        return 1

    @classmethod
    def acting_rule(cls, cfg: Any, action_space: Any) -> ActingRule:
        check_vmpo_kl_bounds(cfg, action_space)
        # the built-in trunks' core outputs are --hidden_size wide (the learner checks the model's)
        return APPOActingRule(action_space, cfg.hidden_size if replay_needs_features(replay_specs(cfg)) else 0)

    @classmethod
    def check_model(cls, cfg: Any, model: torch.nn.Module) -> None:
        if minibatch_unit(cfg) == "transitions" and model.memory_len:
            raise ConfigError(f"--minibatch_unit=transitions shuffles single steps; this model's core keeps a memory "
                              f"of {model.memory_len} steps (--rnn_type={cfg.rnn_type}), which they cannot be trained "
                              f"without; allowed: a model without a recurrent core, or --minibatch_unit=trajectories")
        if replay_needs_features(replay_specs(cfg)):
            # the acting rule's `features` field is sized before any model exists, from --hidden_size
            width = getattr(getattr(model, "trunks", [None])[0], "out_size", None)
            if width != cfg.hidden_size:
                raise ConfigError(f"a custom replay buffer compares the core's output features, {cfg.hidden_size} "
                                  f"wide (--hidden_size); this model's are {width}: allowed: a model whose policy "
                                  f"trunk gives --hidden_size features, or standard buffers only")

    @classmethod
    def host_memory_bytes(cls, cfg: Any, trajectory_bytes: int) -> int:
        return sum(s.capacity for s in replay_specs(cfg) if s.type != "queue") * trajectory_bytes

    @classmethod
    def pbt_hyperparameters(cls, cfg: Any) -> dict[str, tuple[float, float]]:
        return {"learning_rate": (1e-6, 1e-2), "exploration_loss_coeff": (1e-6, 0.1),
                "value_loss_coeff": (0.01, 5.0), "max_grad_norm": (0.1, 100.0),
                "ppo_clip_ratio": (0.02, 0.5), "ppo_clip_value": (0.01, 20.0)}
