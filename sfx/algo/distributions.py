"""Action distributions built from a policy head's flat parameter vector.

Supported gymnasium action spaces and their layout in a batch:

=====================  ==============================  ===========================
space                  params ``[B, P]``               actions ``[B, k]``
=====================  ==============================  ===========================
Discrete(n)            logits, P = n                   k = 1
Tuple(Discrete, ...)   logits of each, concatenated    k = number of components
MultiDiscrete(nvec)    logits of each, concatenated    k = len(nvec)
Box(shape)             [mean, log_std], P = 2 * dim    k = dim = prod(shape)
=====================  ==============================  ===========================

Buffers store actions as float32 ``[B, k]``; ``log_prob`` accepts float or integer actions.
The ``start`` offset of Discrete / MultiDiscrete spaces is applied only in ``action_to_env``:
inside the trainer a categorical action is always an index in ``[0, n)``.
"""

from __future__ import annotations

import functools

import math
from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces

__all__ = [
    "ActionDistribution",
    "Categorical",
    "TupleCategorical",
    "DiagGaussian",
    "UnsupportedActionSpaceError",
    "action_params_size",
    "action_shape",
    "make_action_distribution",
    "action_to_env",
    "LOG_STD_MIN",
    "LOG_STD_MAX",
    "MASKED_LOGIT",
]

# exp(-5) ~ 0.007 keeps log-probs finite when the policy collapses, exp(2) ~ 7.4 is far wider than
# any normalised action range; outside this range log_std gets no gradient.
LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)

# The logit of a masked (not allowed) choice, as the model writes it for an ``action_mask``: exp() underflows to
# exactly 0 and 0 * log p stays 0 (-inf would make the entropy NaN). A categorical distribution treats every
# choice whose logit is at or below half of it as masked; no trained policy comes near such a logit.
MASKED_LOGIT = -1e9

_SUPPORTED = "Discrete, Tuple of Discrete, MultiDiscrete (1-D) or Box"


class UnsupportedActionSpaceError(ValueError):
    """The action space has no distribution here."""


def _categorical_sizes(space: spaces.Space) -> list[int] | None:
    """Number of choices of each categorical component, or None if ``space`` is not categorical."""
    if isinstance(space, spaces.Discrete):
        return [int(space.n)]
    if isinstance(space, spaces.Tuple) and len(space.spaces) > 0 and all(
        isinstance(s, spaces.Discrete) for s in space.spaces
    ):
        return [int(s.n) for s in space.spaces]
    if isinstance(space, spaces.MultiDiscrete) and len(space.nvec.shape) == 1:
        return [int(n) for n in space.nvec]
    return None


def categorical_sizes(space: spaces.Space) -> list[int] | None:
    """Choices of each categorical head of a supported action space (one per column of a stored
    action); None for Box actions."""
    _check_supported(space)
    return _categorical_sizes(space)


def _check_supported(space: Any) -> None:
    if isinstance(space, spaces.Box) or _categorical_sizes(space) is not None:
        return
    raise UnsupportedActionSpaceError(f"unsupported action space {space!r}; expected {_SUPPORTED}")


def action_params_size(action_space: spaces.Space) -> int:
    """Width ``P`` of the policy head's output for ``action_space``."""
    _check_supported(action_space)
    if isinstance(action_space, spaces.Box):
        return 2 * int(np.prod(action_space.shape, dtype=np.int64))
    return sum(_categorical_sizes(action_space))


def action_shape(action_space: spaces.Space) -> int:
    """Number ``k`` of columns one action takes in an ``[B, k]`` action tensor."""
    _check_supported(action_space)
    if isinstance(action_space, spaces.Box):
        return int(np.prod(action_space.shape, dtype=np.int64))
    return len(_categorical_sizes(action_space))


class ActionDistribution(ABC):
    """A batch of ``B`` action distributions."""

    @abstractmethod
    def sample(self) -> torch.Tensor:
        """Random actions ``[B, k]`` (int64 for categorical, float for Gaussian)."""

    @abstractmethod
    def mode(self) -> torch.Tensor:
        """Most likely actions ``[B, k]``."""

    @abstractmethod
    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-likelihood ``[B]`` of ``actions`` ``[B, k]`` (float or integer)."""

    @abstractmethod
    def entropy(self) -> torch.Tensor:
        """Entropy ``[B]``."""

    @abstractmethod
    def kl_divergence(self, other: "ActionDistribution") -> torch.Tensor:
        """``KL(self || other)`` ``[B]``; ``other`` must be of the same kind and size."""

    def symmetric_kl_with_uniform(self) -> torch.Tensor:
        """``0.5 * (KL(pi || u) + KL(u || pi))`` ``[B]`` against the uniform distribution ``u`` over the
        same actions: the exploration penalty Sample Factory's VizDoom agents use
        (``--exploration_loss=symmetric_kl``). Defined for categorical actions only."""
        raise UnsupportedActionSpaceError(
            f"--exploration_loss=symmetric_kl needs discrete actions (a uniform prior); {type(self).__name__} has "
            f"none. Allowed for continuous actions: --exploration_loss=entropy")


class Categorical(ActionDistribution):
    """One categorical choice per row; ``params [B, n]`` are unnormalised logits.

    Masked choices (logit ``<= MASKED_LOGIT / 2``, or ``-inf``) have probability 0: they add 0 to the entropy
    and the KL, and the uniform prior of ``symmetric_kl_with_uniform`` is over the allowed choices only. A row
    with no allowed choice counts all of its choices as allowed (as the model's masking does)."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits
        self.log_probs = F.log_softmax(logits, dim=-1)

    @functools.cached_property
    def allowed(self) -> torch.Tensor:
        """``[B, n]`` bool, the allowed choices; computed only where the losses need it, not when acting."""
        allowed = self.logits > MASKED_LOGIT / 2
        return allowed | ~allowed.any(dim=-1, keepdim=True)

    @property
    def probs(self) -> torch.Tensor:
        return self.log_probs.exp()

    def sample(self) -> torch.Tensor:
        return torch.multinomial(self.probs, 1)

    def mode(self) -> torch.Tensor:
        return self.log_probs.argmax(dim=-1, keepdim=True)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        index = actions.reshape(self.log_probs.shape[0], 1).long()
        return self.log_probs.gather(-1, index).squeeze(-1)

    def _counts(self) -> torch.Tensor:
        """``[B, n]`` bool: the choices that count (allowed, and of non-zero probability)."""
        return self.allowed & ~self.log_probs.isneginf()

    def entropy(self) -> torch.Tensor:
        # p * log p with p = 0 is 0; masked and -inf logits would otherwise give 0 * -1e9 (a zero gradient only
        # by luck of underflow) or 0 * -inf = NaN
        counts = self._counts()
        plogp = self.probs * torch.where(counts, self.log_probs, torch.zeros_like(self.log_probs))
        return -torch.where(counts, plogp, torch.zeros_like(plogp)).sum(-1)

    def kl_divergence(self, other: ActionDistribution) -> torch.Tensor:
        if not isinstance(other, Categorical):
            raise TypeError(f"KL between Categorical and {type(other).__name__} is not defined")
        diff = self.probs * (self.log_probs - other.log_probs)
        return torch.where(self._counts(), diff, torch.zeros_like(diff)).sum(-1)

    def symmetric_kl_with_uniform(self) -> torch.Tensor:
        # u is uniform over the m allowed choices A (pi is 0 outside A):
        # KL(pi || u) = log m - H(pi);  KL(u || pi) = -log m - (1/m) sum_{a in A} log pi(a)
        # so their mean is 0.5 * (-H(pi) - mean_{a in A} log pi(a)); the log m terms cancel
        allowed = self.allowed
        m = allowed.sum(-1).to(self.log_probs.dtype)
        mean_log_pi = torch.where(allowed, self.log_probs, torch.zeros_like(self.log_probs)).sum(-1) / m
        return 0.5 * (-self.entropy() - mean_log_pi)


class TupleCategorical(ActionDistribution):
    """Independent categorical choices, one per column; log-prob, entropy and KL are sums."""

    def __init__(self, logits: torch.Tensor, sizes: list[int]) -> None:
        self.sizes = list(sizes)
        self.components = [Categorical(chunk) for chunk in torch.split(logits, self.sizes, dim=-1)]

    def sample(self) -> torch.Tensor:
        return torch.cat([c.sample() for c in self.components], dim=-1)

    def mode(self) -> torch.Tensor:
        return torch.cat([c.mode() for c in self.components], dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        actions = actions.reshape(actions.shape[0], len(self.components))
        return torch.stack([c.log_prob(actions[:, i]) for i, c in enumerate(self.components)], dim=-1).sum(-1)

    def entropy(self) -> torch.Tensor:
        return torch.stack([c.entropy() for c in self.components], dim=-1).sum(-1)

    def kl_divergence(self, other: ActionDistribution) -> torch.Tensor:
        if not isinstance(other, TupleCategorical) or other.sizes != self.sizes:
            raise TypeError("KL between TupleCategorical distributions needs the same component sizes")
        return torch.stack(
            [a.kl_divergence(b) for a, b in zip(self.components, other.components)], dim=-1
        ).sum(-1)

    def symmetric_kl_with_uniform(self) -> torch.Tensor:
        return torch.stack([c.symmetric_kl_with_uniform() for c in self.components], dim=-1).sum(-1)


class DiagGaussian(ActionDistribution):
    """Diagonal Gaussian; ``params [B, 2*dim]`` = ``[mean, log_std]``.

    ``log_std`` is clamped to ``[LOG_STD_MIN, LOG_STD_MAX]`` so a collapsing or exploding
    policy cannot produce infinite log-probs.
    """

    def __init__(self, params: torch.Tensor) -> None:
        self.mean, log_std = torch.chunk(params, 2, dim=-1)
        self.log_std = torch.clamp(log_std, LOG_STD_MIN, LOG_STD_MAX)
        self.std = self.log_std.exp()

    def sample(self) -> torch.Tensor:
        return self.mean + self.std * torch.randn_like(self.mean)

    def mode(self) -> torch.Tensor:
        return self.mean

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        actions = actions.reshape(self.mean.shape).to(self.mean.dtype)
        z = (actions - self.mean) / self.std
        return (-0.5 * z**2 - self.log_std - _HALF_LOG_2PI).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (0.5 + _HALF_LOG_2PI + self.log_std).sum(-1)

    def kl_divergence(self, other: ActionDistribution) -> torch.Tensor:
        if not isinstance(other, DiagGaussian):
            raise TypeError(f"KL between DiagGaussian and {type(other).__name__} is not defined")
        var_ratio = (self.std / other.std) ** 2
        mean_term = ((self.mean - other.mean) / other.std) ** 2
        return (other.log_std - self.log_std + 0.5 * (var_ratio + mean_term) - 0.5).sum(-1)


def make_action_distribution(action_space: spaces.Space, params: torch.Tensor) -> ActionDistribution:
    """The distribution over ``action_space`` given the head's output ``params [B, P]``."""
    _check_supported(action_space)
    expected = action_params_size(action_space)
    if params.shape[-1] != expected:
        raise ValueError(
            f"action params have width {params.shape[-1]}, {action_space!r} needs {expected}"
        )
    if isinstance(action_space, spaces.Box):
        return DiagGaussian(params)
    if isinstance(action_space, spaces.Discrete):
        return Categorical(params)
    return TupleCategorical(params, _categorical_sizes(action_space))


def action_to_env(space: spaces.Space, row: np.ndarray) -> Any:
    """Convert one stored action row ``[k]`` into what ``env.step`` expects.

    Discrete -> ``int``; Tuple of Discrete -> ``tuple`` of ``int``; MultiDiscrete -> int64 array;
    Box -> array of the space's shape (float32 unless the space is another float type), clipped to
    the bounds because Gaussian samples are unbounded. ``start`` offsets are added here.
    """
    row = np.asarray(row).reshape(-1)
    if isinstance(space, spaces.Discrete):
        return int(row[0]) + int(space.start)
    if isinstance(space, spaces.Tuple) and _categorical_sizes(space) is not None:
        return tuple(int(a) + int(s.start) for a, s in zip(row, space.spaces))
    if isinstance(space, spaces.MultiDiscrete) and _categorical_sizes(space) is not None:
        return row.astype(np.int64) + space.start.astype(np.int64)
    if isinstance(space, spaces.Box):
        dtype = space.dtype if np.issubdtype(space.dtype, np.floating) else np.float32
        action = row.astype(dtype).reshape(space.shape)
        return np.clip(action, space.low, space.high).astype(dtype, copy=False)
    raise UnsupportedActionSpaceError(f"unsupported action space {space!r}; expected {_SUPPORTED}")
