"""The kit's gradient step and target network.

- :func:`gradient_step`: one optimizer step on a loss: a non-finite loss voted on across ranks (a minibatch
  that is bad on one rank is skipped on all, so the ranks' collectives stay paired), gradients zeroed,
  backward (with ranks: each rank's loss weighted, gradients summed, so the step is the one of all ranks'
  minibatches together), optional clipping of the gradient norm (a non-finite norm applies nothing), step.
- :class:`TargetNetwork`: a frozen copy of a network, renewed by a hard copy (R2D2, DQN) or by Polyak
  averaging (SAC, :func:`sfx.algo.sac.polyak_update_`), checkpointed by its state dict.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Iterable, Mapping

import torch

from sfx.agents.base import NonFiniteBatch
from sfx.algo.sac import polyak_update_

__all__ = ["TargetNetwork", "gradient_step"]


def gradient_step(loss: torch.Tensor, optimizer: torch.optim.Optimizer, params: Iterable[torch.Tensor],
                  what: str = "loss", max_grad_norm: float | None = None, group: Any = None,
                  weight: torch.Tensor | float | None = None) -> torch.Tensor | None:
    """``optimizer.step()`` on the gradient of ``loss`` for ``params`` (the optimizer's parameters).

    Args:
        loss: a scalar with a graph to ``params``.
        optimizer: steps ``params``.
        params: their gradients are zeroed (set to None) before the backward pass, summed over ranks, clipped.
        what: the name a non-finite loss is reported under (:class:`~sfx.agents.base.NonFiniteBatch`).
        max_grad_norm: the gradient norm is clipped to it (``--max_grad_norm``; ``<= 0``: measured, not clipped);
            a non-finite norm zeroes the gradients and applies nothing. None: no clipping and no norm.
        group: a :class:`~sfx.engine.data_parallel.GradientGroup` with several ranks, or None.
        weight: with ``group``, this rank's share of the step (its loss is multiplied by it before the
            gradients are summed over ranks); None: ``1 / world_size`` (every rank's minibatch counts alike).

    Returns:
        The gradient norm before clipping (None without ``max_grad_norm``).

    Raises:
        NonFiniteBatch: the loss (on any rank) or the gradient norm is not finite; nothing was applied.
    """
    bad = not bool(torch.isfinite(loss))
    # with ranks every rank joins the vote, bad or not: one that skipped it would pair its next collective
    # with the others' vote
    if group.any(bad) if group is not None else bad:
        raise NonFiniteBatch(what)
    params = list(params)
    for p in params:
        p.grad = None
    if group is None:
        loss.backward()
    else:
        if weight is None:
            (loss / group.world_size).backward()
        else:
            (loss * (weight.to(loss.dtype) if isinstance(weight, torch.Tensor) else weight)).backward()
        group.sum_gradients(params)
    grad_norm = None
    if max_grad_norm is not None:
        # an infinite bound still measures the norm
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm > 0 else math.inf)
        if not bool(torch.isfinite(grad_norm)):  # the same on every rank: the gradients are summed
            for p in params:
                p.grad = None
            raise NonFiniteBatch("gradients")
    optimizer.step()
    return grad_norm


class TargetNetwork:
    """A frozen copy of ``online`` (no gradients), the network a learner bootstraps from.

    ``net`` is the copy (call its methods); :meth:`hard_update` copies the online weights, :meth:`polyak_update`
    moves them ``tau`` of the way (``sfx.algo.sac.polyak_update_``). :meth:`state_dict` is the copy's own (the
    same keys as the online network's), for checkpoints."""

    def __init__(self, online: torch.nn.Module) -> None:
        self.net = copy.deepcopy(online).eval()  # never trained: no train-mode behaviour
        for p in self.net.parameters():
            p.requires_grad_(False)

    def hard_update(self, online: torch.nn.Module) -> None:
        self.net.load_state_dict(online.state_dict())

    def polyak_update(self, online: torch.nn.Module, tau: float) -> None:
        polyak_update_(self.net, online, tau)

    def state_dict(self) -> dict[str, Any]:
        return self.net.state_dict()

    def load_state_dict(self, state: Mapping[str, Any] | None, online: torch.nn.Module) -> None:
        """The saved weights; ``None`` (a checkpoint without them): a copy of ``online``'s."""
        self.net.load_state_dict(state if state is not None else online.state_dict())
