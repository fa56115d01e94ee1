"""The one result type of the target recursions (V-trace, GAE), and how both skip inactive steps.

Inactive steps (multi-agent: ``active_t`` False, an agent waiting for its turn or sitting out) are not
time steps of the agent: it takes no decision there and its value head is never trained on them. The
recursions make them transparent: an inactive step passes the quantities of the next active step
(its value, its target) back to the active step before it, adding its own reward and cutting at its
own episode end, and no active step's target reads an inactive step's value, ratio or trace.
For a quantity ``y`` of the active steps (a value, a target) with ``y[T]`` after the last step
(the bootstrap), the carried quantity is

    Y[T] = y[T]
    Y[t] = y[t]                              active_t
    Y[t] = r_t + discount_t * Y[t + 1]       inactive_t

so an active step ``t`` followed by inactive steps ``t+1 .. t'-1`` and the next active step ``t'`` sees

    Y[t + 1] = sum_{k=t+1}^{t'-1} (prod_{j=t+1}^{k-1} discount_j) r_k + (prod_{j=t+1}^{t'-1} discount_j) y[t']

in place of ``y[t + 1]``. ``discount_t`` of an inactive step is the caller's: ``appo_targets`` passes
``1 - done_t`` (no ``gamma``: waiting is not a time step of the agent, so the agent's discount between
two of its decisions is one ``gamma``, whatever the number of waiting steps between them).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["Targets", "carry_through_inactive", "scale_rewards"]


class Targets(NamedTuple):
    """Value targets and advantages, same shape (``[T, B]`` time-major from ``vtrace`` / ``gae``).

    Attributes:
        returns: what the value head regresses to: V-trace's ``v_s``, or GAE's lambda-returns.
        advantages: the policy-gradient advantages.
    """

    returns: torch.Tensor
    advantages: torch.Tensor


def carry_through_inactive(own: torch.Tensor, last: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor,
                           active: torch.Tensor) -> torch.Tensor:
    """``Y [T + 1, B]`` of the module docstring: ``own [T, B]`` at active steps, ``last [B]`` at ``T``,
    ``rewards_t + discounts_t * Y[t + 1]`` at inactive steps (``rewards``, ``discounts`` ``[T, B]``,
    ``active`` bool ``[T, B]``). Where every step is active, ``Y = cat(own, last)`` exactly."""
    if bool(active.all()):  # the common single-agent case: nothing to carry
        return torch.cat([own, last.unsqueeze(0)], dim=0)
    out = torch.empty((own.shape[0] + 1, *own.shape[1:]), dtype=own.dtype, device=own.device)
    out[-1] = last
    for t in range(own.shape[0] - 1, -1, -1):
        out[t] = torch.where(active[t], own[t], rewards[t] + discounts[t] * out[t + 1])
    return out


def scale_rewards(rewards: torch.Tensor, scale: float, clip: float) -> torch.Tensor:
    """``clip(scale * rewards, -clip, clip)`` elementwise: ``--reward_scale``, then ``--reward_clip`` on the scaled
    rewards (``sfx.algo.appo``'s ``r_t``, R2D2's and SAC's rewards: one definition, so that a flag means
    the same for every agent). Applied to each env step's reward, before any n-step sum.

    Args:
        rewards: any shape, floating point: the env's rewards.
        scale: > 0, finite.
        clip: > 0 (``inf``: no clipping).
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0.0 < float(scale) < float("inf"):
        raise ValueError(f"scale_rewards: scale={scale!r}; must be a finite number > 0")
    if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not float(clip) > 0.0:
        raise ValueError(f"scale_rewards: clip={clip!r}; must be a number > 0 (inf: no clipping)")
    return (rewards * scale).clamp(-clip, clip)
