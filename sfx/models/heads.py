"""Heads: features ``[N, F]`` from a trunk -> what an agent needs. An agent's model assembles them with
:class:`sfx.models.preprocess.ObsPreprocessor` and :class:`sfx.models.trunk.Trunk`.

* :class:`ActionParamsHead`: the parameters of the action distribution (``sfx.algo.distributions``):
  logits of each categorical head, masked choices at ``MASKED_LOGIT``; ``[mean, log_std]`` for Box
  actions, the log-stddev either a head output or (Sample Factory 1.x's ``--adaptive_stddev=False``) one
  learned parameter per action dimension, independent of the observation.
* :class:`ValueHead`: a state value in the head's (normalized) scale and its conversion to the env's
  reward scale: identity, a running returns normalizer, or PopArt with one output per task.

The heads keep PyTorch's default initialisation; an assembly initialises them as it needs
(``sfx.models.encoders.init_weights``), after building all of them, so that seeded weights do not
depend on which heads a model has.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch
import torch.nn as nn

from sfx.algo.distributions import (LOG_STD_MAX, LOG_STD_MIN, MASKED_LOGIT, action_params_size, action_shape,
                                    categorical_sizes)
from sfx.algo.normalizers import RunningMeanStd
from sfx.algo.popart import select_task_values
from sfx.errors import ConfigError
from sfx.models.popart import PopArt


class ActionParamsHead(nn.Module):
    """Features ``[N, F]`` -> ``action_params [N, P]`` for ``action_space``.

    Attributes:
        out_size: ``P``, the width of ``action_params`` (``action_params_size(action_space)``).
        linear: ``[N, F] -> [N, P]``, or the means ``[N, P / 2]`` when ``log_std`` is set.
        log_std: the state-independent log-stddev ``[P / 2]`` (``adaptive_stddev=False`` with Box
            actions), else ``None``; discrete spaces have no stddev and ignore the option.
    """

    def __init__(self, in_features: int, action_space: gym.Space, adaptive_stddev: bool = True,
                 initial_stddev: float = 1.0):
        super().__init__()
        self.action_sizes = categorical_sizes(action_space)  # None for Box actions
        self.out_size: int = action_params_size(action_space)
        self.log_std: nn.Parameter | None = None
        if isinstance(action_space, gym.spaces.Box) and not adaptive_stddev:
            initial_stddev = float(initial_stddev)
            low, high = math.exp(LOG_STD_MIN), math.exp(LOG_STD_MAX)
            # DiagGaussian clamps log_std to [LOG_STD_MIN, LOG_STD_MAX]: a parameter starting outside
            # would get no gradient and never move
            if not low <= initial_stddev <= high:
                raise ConfigError(f"--initial_stddev={initial_stddev} is not valid with --adaptive_stddev=False; "
                                  f"allowed: a number in [{low:.4g}, {high:.4g}] (the stddev range of continuous "
                                  f"actions)")
            self.linear = nn.Linear(in_features, action_shape(action_space))
            self.log_std = nn.Parameter(torch.full((action_shape(action_space),), math.log(initial_stddev)))
        else:
            self.linear = nn.Linear(in_features, self.out_size)

    @classmethod
    def from_cfg(cls, cfg: Any, in_features: int, action_space: gym.Space) -> "ActionParamsHead":
        """Reads ``adaptive_stddev`` and ``initial_stddev``."""
        return cls(in_features, action_space, bool(cfg.adaptive_stddev), cfg.initial_stddev)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Features ``[N, F]`` -> ``action_params [N, P]``; ``mask [N, P]`` (categorical actions, 0/1 per
        choice): masked logits become ``MASKED_LOGIT`` (probability 0). A categorical head with no allowed
        choice (an agent that does not act) stays unmasked."""
        params = self.linear(x)
        if mask is not None:
            allowed = mask.reshape(params.shape).bool()
            start = 0
            for n in self.action_sizes:
                head = allowed[:, start:start + n]
                allowed[:, start:start + n] = head | ~head.any(dim=1, keepdim=True)
                start += n
            params = params.masked_fill(~allowed, MASKED_LOGIT)
        if self.log_std is None:
            return params
        return torch.cat([params, self.log_std.expand(params.shape[0], -1)], dim=-1)


class ValueHead(nn.Module):
    """Features ``[N, F]`` -> a value per sample in the head's scale, and the map to and from the reward scale.

    Without a normalizer the scales are the same; with ``returns_normalizer`` the head predicts returns
    standardized by it (the learner updates it from its targets); with ``popart`` the head has one output
    per task, each in its task's normalized scale (the learner updates the statistics and rescales
    ``linear`` with ``PopArt.update``). Returns are never clipped: a clipped target would cap what the
    critic can learn.

    Attributes:
        linear: ``nn.Linear(F, K)``, ``K`` = PopArt's tasks or 1.
        popart: ``PopArt`` or None.
        returns_normalizer: ``RunningMeanStd`` or None (never both).
    """

    def __init__(self, in_features: int, popart: PopArt | None = None,
                 returns_normalizer: RunningMeanStd | None = None):
        super().__init__()
        if popart is not None and returns_normalizer is not None:
            raise ValueError("a value head normalizes returns with PopArt or with a returns normalizer, not both")
        # registered before the layer: the actor-critic's state-dict order before the parts were split out
        self.popart = popart
        self.returns_normalizer = returns_normalizer
        self.linear = nn.Linear(in_features, popart.num_tasks if popart is not None else 1)

    @classmethod
    def from_cfg(cls, cfg: Any, in_features: int, num_tasks: int = 1) -> "ValueHead":
        """Reads ``popart``, ``popart_beta``, ``popart_clip_min``, ``popart_preserve_mean`` and
        ``normalize_returns`` (PopArt replaces the returns normalizer)."""
        popart = PopArt(int(num_tasks), float(cfg.popart_beta), float(cfg.popart_clip_min),
                        preserve_mean=bool(cfg.popart_preserve_mean)) if cfg.popart else None
        returns = RunningMeanStd((), clip=None) if cfg.normalize_returns and popart is None else None
        return cls(in_features, popart, returns)

    def forward(self, x: torch.Tensor, tasks: torch.Tensor | None = None) -> torch.Tensor:
        """Features ``[N, F]`` -> ``[N]`` values in the head's scale, each sample's own task's output
        (``tasks [N]``; None = task 0)."""
        out = self.linear(x)
        if out.shape[-1] == 1:
            return out.squeeze(-1)
        return select_task_values(out, tasks)

    def normalize(self, v: torch.Tensor, tasks: torch.Tensor | None = None) -> torch.Tensor:
        """Returns in the reward scale -> the head's scale (identity without a normalizer). ``tasks`` (``[B]``,
        ``v`` is ``[B]`` or ``[B, T]``): each sample's task, for PopArt's per-task statistics (None = task 0)."""
        if self.popart is not None:
            return self.popart.normalize(v, tasks)
        return v if self.returns_normalizer is None else self.returns_normalizer.normalize(v)

    def denormalize(self, v: torch.Tensor, tasks: torch.Tensor | None = None) -> torch.Tensor:
        """The head's scale -> the reward scale (identity without a normalizer); ``tasks`` as in :meth:`normalize`."""
        if self.popart is not None:
            return self.popart.denormalize(v, tasks)
        return v if self.returns_normalizer is None else self.returns_normalizer.denormalize(v)
