"""Proportional prioritized sampling over a fixed number of slots: a sum tree, vectorised with torch.

Schaul et al. 2016, "Prioritized Experience Replay", section 3.3 and appendix B.2.1: item ``i`` is drawn
with probability ``P(i) = p_i^alpha / sum_j p_j^alpha``, found by descending a binary tree whose nodes hold
the sums of their leaves; a batch of ``k`` is stratified: the range ``[0, total)`` is cut into ``k`` equal
segments and one value is drawn uniformly from each (as Ape-X, Horgan et al. 2018, samples too). R2D2
(Kapturowski et al. 2019, table 2) uses ``alpha = 0.9``.

``SumTree`` stores whatever non-negative weights it is given; ``PrioritizedSampler`` is the replay's view:
it takes raw priorities, applies the exponent ``alpha`` itself and remembers the raw values. A slot of
priority 0 (an empty slot, or one taken out) is never drawn, whatever ``alpha`` (``0^0`` counts as 0).

The tree is a list of levels, ``levels[0]`` the root ``[1]`` .. ``levels[-1]`` the leaves ``[2^L]`` (the
capacity rounded up to a power of two, the padding leaves 0); node ``i`` of level ``l`` has the children
``2i`` and ``2i + 1`` of level ``l + 1``. An update writes the leaves and recomputes the ancestors of the
written ones level by level (sums recomputed from the children, not accumulated deltas, so rounding never
drifts); a sample descends all ``k`` values at once. Both are ``O(k log capacity)`` tensor work with a
Python loop over the ``L`` levels only. Weights are kept in float64 by default.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

__all__ = ["PrioritizedSample", "PrioritizedSampler", "SumTree"]


class PrioritizedSample(NamedTuple):
    """A stratified sample of ``k`` slots.

    Attributes:
        indices: ``[k]`` int64 slot indices, non-decreasing (segment ``i``'s draw is the ``i``-th).
        probabilities: ``[k]`` ``P(i)`` each was drawn with (weight / total), for ``importance_weights``.
    """

    indices: torch.Tensor
    probabilities: torch.Tensor


def _check_count(cls: str, name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{cls}: {name}={value!r}; must be an integer >= 1")


def _check_weights(cls: str, name: str, weights: torch.Tensor, indices: torch.Tensor,
                   like: torch.Tensor) -> torch.Tensor:
    """``weights`` as ``like``'s dtype and device, after checking it is ``[k]`` like ``indices``, finite, >= 0."""
    if not isinstance(weights, torch.Tensor) or weights.shape != indices.shape:
        shape = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ValueError(f"{cls}: {name} has shape {shape}, expected {tuple(indices.shape)} like indices")
    weights = weights.detach().to(device=like.device, dtype=like.dtype)
    ok = torch.isfinite(weights) & (weights >= 0)
    if not bool(ok.all()):
        bad = weights[~ok][0].item()
        raise ValueError(f"{cls}: priority {bad!r} in {name}; priorities must be finite and >= 0")
    return weights


def _last_wins(indices: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct ``indices`` with, for each, the value at its last occurrence (index_put with repeated
    indices keeps an unspecified one)."""
    if indices.numel() <= 1:
        return indices, values
    unique, inverse = torch.unique(indices, return_inverse=True)
    order = torch.arange(indices.numel(), device=indices.device)
    last = torch.full_like(unique, -1).scatter_reduce(0, inverse, order, reduce="amax")
    return unique, values[last]


class SumTree:
    """A sum tree over ``capacity`` slots of non-negative weights (module docstring), all weights 0 at first.

    Args:
        capacity: number of slots, >= 1.
        dtype: floating dtype of the weights and sums (float64: sums of a million weights stay exact enough
            that no zero-weight slot is ever reached).
        device: where the tree lives; ``sample``'s generator must be on the same device.
    """

    def __init__(self, capacity: int, dtype: torch.dtype = torch.float64, device: torch.device | str = "cpu"):
        _check_count("SumTree", "capacity", capacity)
        if not dtype.is_floating_point:
            raise ValueError(f"SumTree: dtype={dtype}; must be a floating-point dtype")
        self.capacity = capacity
        self.depth = max(0, math.ceil(math.log2(capacity)))
        self.levels = [torch.zeros(2 ** level, dtype=dtype, device=device) for level in range(self.depth + 1)]

    @property
    def leaves(self) -> torch.Tensor:
        """``[capacity]`` the weights (a view: do not write to it, use ``update``)."""
        return self.levels[-1][:self.capacity]

    def _check_indices(self, indices: torch.Tensor) -> torch.Tensor:
        if not isinstance(indices, torch.Tensor) or indices.dim() != 1 or indices.dtype.is_floating_point \
                or indices.dtype == torch.bool:
            shape = tuple(indices.shape) if isinstance(indices, torch.Tensor) else type(indices).__name__
            raise ValueError(f"SumTree: indices must be a [k] integer tensor, got {shape}")
        indices = indices.to(device=self.levels[-1].device, dtype=torch.long)
        if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= self.capacity):
            bad = indices[(indices < 0) | (indices >= self.capacity)][0].item()
            raise ValueError(f"SumTree: index {bad}; slots are 0 .. {self.capacity - 1}")
        return indices

    def update(self, indices: torch.Tensor, weights: torch.Tensor) -> None:
        """Set the weights of the given slots; where an index repeats, its last weight wins.

        Args:
            indices: ``[k]`` integer slot indices in ``[0, capacity)``.
            weights: ``[k]`` finite weights >= 0.
        """
        indices = self._check_indices(indices)
        weights = _check_weights("SumTree", "weights", weights, indices, self.levels[-1])
        if indices.numel() == 0:
            return
        indices, weights = _last_wins(indices, weights)
        self.levels[-1][indices] = weights
        nodes = indices
        for level in range(self.depth, 0, -1):
            # repeated parents are written the same sum: no need to deduplicate
            nodes = nodes // 2
            children = self.levels[level]
            self.levels[level - 1][nodes] = children[2 * nodes] + children[2 * nodes + 1]

    def get(self, indices: torch.Tensor) -> torch.Tensor:
        """``[k]`` the weights of the given slots."""
        return self.levels[-1][self._check_indices(indices)]

    def total(self) -> float:
        """The sum of all weights."""
        return float(self.levels[0][0])

    def sample(self, k: int, generator: torch.Generator | None = None) -> PrioritizedSample:
        """Draw ``k`` slots with replacement, stratified: value ``i`` is ``(i + U_i) / k * total`` with
        ``U_i ~ U[0, 1)``, and the slot is the one whose cumulative-weight interval contains it. Slots of
        weight 0 are never drawn (rounding at an interval's edge steps away from an empty subtree).

        Args:
            k: the number of draws, >= 1.
            generator: the random stream (seeded for reproducible samples); ``None`` = torch's global one.

        Raises:
            ValueError: ``k`` < 1, or every weight is 0 (nothing to sample).
        """
        _check_count("SumTree.sample", "k", k)
        root = self.levels[0]
        total = root[0]
        if not bool(total > 0):
            raise ValueError("SumTree.sample: every priority is 0; update some slots with priorities > 0 first")
        u = torch.rand(k, generator=generator, dtype=root.dtype, device=root.device)
        value = (torch.arange(k, dtype=root.dtype, device=root.device) + u) / k * total
        node = torch.zeros(k, dtype=torch.long, device=root.device)
        for level in range(1, self.depth + 1):
            left = self.levels[level][2 * node]
            right = self.levels[level][2 * node + 1]
            # value can reach past a subtree's sum by rounding: never step into an empty subtree
            go_right = ((value >= left) & (right > 0)) | (left <= 0)
            value = torch.where(go_right, (value - left).clamp(min=0), torch.minimum(value, left))
            node = 2 * node + go_right.long()
        return PrioritizedSample(indices=node, probabilities=self.levels[-1][node] / total)


class PrioritizedSampler:
    """Proportional prioritized sampling with the priority exponent applied here:
    ``P(i) = p_i^alpha / sum_j p_j^alpha`` (Schaul et al. 2016, eq. 1), over ``capacity`` slots.

    Args:
        capacity: number of slots, >= 1.
        alpha: the priority exponent in [0, 1] (R2D2: 0.9; 0 = uniform over the slots of priority > 0).
        device: where the tree lives.
    """

    def __init__(self, capacity: int, alpha: float = 0.9, device: torch.device | str = "cpu"):
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= float(alpha) <= 1.0:
            raise ValueError(f"PrioritizedSampler: alpha={alpha!r}; the priority exponent must be in [0, 1]")
        self.alpha = float(alpha)
        self.tree = SumTree(capacity, device=device)
        self.capacity = capacity
        self._priorities = torch.zeros(capacity, dtype=self.tree.levels[-1].dtype, device=device)

    def update(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Set the raw priorities ``p_i`` (finite, >= 0; 0 = never drawn) of the given slots (``[k]`` each); a
        repeated index keeps its last priority."""
        indices = self.tree._check_indices(indices)
        p = _check_weights("PrioritizedSampler", "priorities", priorities, indices, self._priorities)
        indices, p = _last_wins(indices, p)
        self.tree.update(indices, torch.where(p > 0, p ** self.alpha, torch.zeros_like(p)))
        self._priorities[indices] = p

    def get(self, indices: torch.Tensor) -> torch.Tensor:
        """``[k]`` the raw priorities of the given slots."""
        return self._priorities[self.tree._check_indices(indices)]

    def total(self) -> float:
        """``sum_j p_j^alpha``."""
        return self.tree.total()

    def sample(self, k: int, generator: torch.Generator | None = None) -> PrioritizedSample:
        """``k`` stratified draws (``SumTree.sample``) with their probabilities ``P(i)``."""
        return self.tree.sample(k, generator)
