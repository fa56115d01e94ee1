"""Generalized Advantage Estimation.

Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage
Estimation", eq. 16:

    A_t = sum_{l>=0} (gamma * lambda)^l delta_{t+l},   delta_t = r_t + gamma V(x_{t+1}) - V(x_t)

With a per-step discount ``discount_t = gamma * (1 - done_t)`` the power ``gamma^l`` becomes the
product of the discounts along the way, so an episode end cuts the sum. Evaluated backwards,
with ``A_T = 0`` and ``V(x_T) = bootstrap_value``:

    delta_t = r_t + discount_t * V(x_{t+1}) - V(x_t)
    A_t     = delta_t + discount_t * lambda * A_{t+1}
    R_t     = A_t + V(x_t)          (the lambda-return, used as the value target)
"""

from __future__ import annotations

import torch

__all__ = ["gae"]


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    discounts: torch.Tensor,
    lambda_: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE advantages and lambda-returns, time-major.

    Args:
        rewards: ``[T, B]`` rewards ``r_t``.
        values: ``[T, B]`` value estimates ``V(x_t)``.
        bootstrap_value: ``[B]`` value estimate ``V(x_T)`` after the last step.
        discounts: ``[T, B]`` ``gamma * (1 - done_t)``; 0 where an episode terminated.
        lambda_: the GAE ``lambda`` in [0, 1] (1 = Monte-Carlo returns, 0 = one-step TD).

    Returns:
        ``(advantages, returns)``, both ``[T, B]``; ``returns = advantages + values``.
        No gradient flows through either.
    """
    if values.dim() != 2:
        raise ValueError(f"gae: values must be [T, B], got shape {tuple(values.shape)}")
    for name, x in (("rewards", rewards), ("discounts", discounts)):
        if x.shape != values.shape:
            raise ValueError(f"gae: {name} has shape {tuple(x.shape)}, expected {tuple(values.shape)} like values")
    if bootstrap_value.shape != values.shape[1:]:
        raise ValueError(
            f"gae: bootstrap_value has shape {tuple(bootstrap_value.shape)}, expected {tuple(values.shape[1:])}"
        )

    with torch.no_grad():
        rewards, values, discounts = rewards.detach(), values.detach(), discounts.detach()
        bootstrap_value = bootstrap_value.detach()

        values_tp1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
        deltas = rewards + discounts * values_tp1 - values
        decay = discounts * lambda_

        advantages = torch.empty_like(values)
        acc = torch.zeros_like(bootstrap_value)
        for t in range(values.shape[0] - 1, -1, -1):
            acc = deltas[t] + decay[t] * acc
            advantages[t] = acc
        returns = advantages + values

    return advantages, returns
