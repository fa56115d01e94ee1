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

Inactive steps (``active_t`` False; ``sfx.algo.targets`` explains why and how) are transparent: with
``V~`` the values carried back through them (``carry_through_inactive``, ``V~[T] = bootstrap_value``)
and ``A_T = 0``,

    active t:    delta_t = r_t + discount_t * V~[t + 1] - V(x_t)
                 A_t     = delta_t + discount_t * lambda * A_{t+1}
                 R_t     = A_t + V(x_t)
    inactive t:  A~_t    = discount_t * A_{t+1}        (carried; the advantage returned there is 0)
                 R_t     = V~[t] + A~_t               (the carried lambda-return of the next active step)

where ``A_{t+1}`` is the carried ``A~`` when step ``t + 1`` is inactive. ``lambda`` weighs the agent's own
steps only, and no active step's result reads an inactive step's value. With every step active this is
the recursion above, to the bit.
"""

from __future__ import annotations

import torch

from sfx.algo._shapes import check_time_major, discounted_backward_scan
from sfx.algo.targets import Targets, carry_through_inactive

__all__ = ["gae"]


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    discounts: torch.Tensor,
    lambda_: float,
    active: torch.Tensor | None = None,
) -> Targets:
    """GAE advantages and lambda-returns, time-major.

    Args:
        rewards: ``[T, B]`` rewards ``r_t``.
        values: ``[T, B]`` value estimates ``V(x_t)``.
        bootstrap_value: ``[B]`` value estimate ``V(x_T)`` after the last step.
        discounts: ``[T, B]`` ``gamma * (1 - done_t)``; 0 where an episode terminated. At an inactive
            step, the factor the next active step's quantities are carried back with (``appo_targets``:
            ``1 - done_t``).
        lambda_: the GAE ``lambda`` in [0, 1] (1 = Monte-Carlo returns, 0 = one-step TD).
        active: ``[T, B]`` bool, False at the agent's inactive steps (transparent, module docstring);
            ``None``: every step is active.

    Returns:
        ``Targets(returns, advantages)``, both ``[T, B]``; ``returns = advantages + values`` at active
        steps, the carried lambda-return and 0 at inactive ones. No gradient flows through either.
    """
    check_time_major("gae", values, bootstrap_value, rewards=rewards, discounts=discounts,
                     **({} if active is None else {"active": active}))

    with torch.no_grad():
        rewards, values, discounts = rewards.detach(), values.detach(), discounts.detach()
        bootstrap_value = bootstrap_value.detach()

        if active is None:
            active = torch.ones_like(values, dtype=torch.bool)
        active = active.to(device=values.device, dtype=torch.bool)

        carried_values = carry_through_inactive(values, bootstrap_value, rewards, discounts, active)  # V~ [T+1, B]
        deltas = rewards + discounts * carried_values[1:] - values
        deltas = torch.where(active, deltas, torch.zeros_like(deltas))
        decay = torch.where(active, discounts * lambda_, discounts)

        carried_advantages = discounted_backward_scan(deltas, decay)
        returns = carried_advantages + carried_values[:-1]  # V~[t] = V(x_t) at active steps
        advantages = torch.where(active, carried_advantages, torch.zeros_like(carried_advantages))

    return Targets(returns=returns, advantages=advantages)
