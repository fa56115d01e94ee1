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

from sfx.algo._shapes import check_time_major, discounted_backward_scan
from sfx.algo.targets import Targets

__all__ = ["gae"]


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    discounts: torch.Tensor,
    lambda_: float,
) -> Targets:
    """GAE advantages and lambda-returns, time-major.

    Args:
        rewards: ``[T, B]`` rewards ``r_t``.
        values: ``[T, B]`` value estimates ``V(x_t)``.
        bootstrap_value: ``[B]`` value estimate ``V(x_T)`` after the last step.
        discounts: ``[T, B]`` ``gamma * (1 - done_t)``; 0 where an episode terminated.
        lambda_: the GAE ``lambda`` in [0, 1] (1 = Monte-Carlo returns, 0 = one-step TD).

    Returns:
        ``Targets(returns, advantages)``, both ``[T, B]``; ``returns = advantages + values``.
        No gradient flows through either.
    """
    check_time_major("gae", values, bootstrap_value, rewards=rewards, discounts=discounts)

    with torch.no_grad():
        rewards, values, discounts = rewards.detach(), values.detach(), discounts.detach()
        bootstrap_value = bootstrap_value.detach()

        values_tp1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
        deltas = rewards + discounts * values_tp1 - values
        decay = discounts * lambda_

        advantages = discounted_backward_scan(deltas, decay)
        returns = advantages + values

    return Targets(returns=returns, advantages=advantages)
