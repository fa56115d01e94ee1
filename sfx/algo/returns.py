"""N-step and Monte-Carlo advantage estimators (the on-policy study's choices besides GAE and V-trace).

Andrychowicz et al. 2021, "What Matters in On-Policy Reinforcement Learning? A Large-Scale Empirical
Study", section 3 ("Advantage estimation"): the N-step return (Sutton & Barto 2018, eq. 7.1)

    R^(N)_t = sum_{j=0}^{N-1} gamma^j r_{t+j} + gamma^N V(x_{t+N}),     A_t = R^(N)_t - V(x_t)

and its limit N = infinity, the Monte-Carlo return ``R_t = sum_j gamma^j r_{t+j}``. As in ``sfx.algo.gae``
the constant ``gamma`` becomes a per-step ``discount_t`` (``gamma * (1 - done_t)``, 0 after a terminated or
truncated step; ``appo_targets`` folds a truncated step's ``gamma * V(final obs)`` into its reward, so a time
limit bootstraps and a termination does not), so ``gamma^j`` is the product of the discounts on the way and
an episode end cuts the sum. A rollout of ``T`` steps that ends inside an episode is bootstrapped from
``V(x_T)`` (``bootstrap_value``): the window of a step near the end stops at ``T``, and the "Monte-Carlo"
return of a fragment is the return to its episode's end or, where the rollout ends first, to ``T`` plus the
discounted ``V(x_T)`` (there are no later rewards in the batch; this equals GAE with ``lambda = 1``).

Evaluated as ``N`` applications of the one-step backup, with ``R^(0) = V`` and ``R^(k)[T] = V(x_T)``:

    R^(k)_t = r_t + discount_t * R^(k-1)_{t+1}

Inactive steps (``active_t`` False; ``sfx.algo.targets``) are transparent as in GAE and V-trace: ``N``
counts the agent's own steps. With ``V~`` the values carried back through inactive steps
(``carry_through_inactive``), ``R^(0) = V~`` and at an inactive step the quantity of the same level is carried:

    active t:    R^(k)_t = r_t + discount_t * R^(k-1)_{t+1}
    inactive t:  R^(k)_t = r_t + discount_t * R^(k)_{t+1}       (the advantage returned there is 0)

so an active step's return is the one of the trajectory with its inactive steps cut out (their rewards
added to the active step before them), and no active step's return reads an inactive step's value.
"""

from __future__ import annotations

import torch

from sfx.algo._shapes import check_time_major
from sfx.algo.targets import Targets, carry_through_inactive

__all__ = ["monte_carlo_returns", "nstep_returns"]


def _prepare(fn: str, rewards: torch.Tensor, values: torch.Tensor, bootstrap_value: torch.Tensor,
             discounts: torch.Tensor, active: torch.Tensor | None):
    check_time_major(fn, values, bootstrap_value, rewards=rewards, discounts=discounts,
                     **({} if active is None else {"active": active}))
    if active is None:
        active = torch.ones_like(values, dtype=torch.bool)
    return (rewards.detach(), values.detach(), bootstrap_value.detach(), discounts.detach(),
            active.to(device=values.device, dtype=torch.bool))


def nstep_returns(
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    discounts: torch.Tensor,
    n: int,
    active: torch.Tensor | None = None,
) -> Targets:
    """N-step returns and advantages, time-major (module docstring).

    Args:
        rewards: ``[T, B]`` rewards ``r_t`` (a truncated step's bootstrap folded in by the caller).
        values: ``[T, B]`` ``V(x_t)``.
        bootstrap_value: ``[B]`` ``V(x_T)`` after the last step.
        discounts: ``[T, B]`` ``gamma * (1 - done_t)``; at an inactive step its carry factor (``1 - done_t``).
        n: the number of the agent's steps summed before bootstrapping, >= 1 (1 = the one-step TD target;
            ``n >= T`` = :func:`monte_carlo_returns`).
        active: ``[T, B]`` bool, False at the agent's inactive steps; ``None``: every step is active.

    Returns:
        ``Targets(returns, advantages)``, ``[T, B]``, no gradient: ``returns = R^(n)`` (the carried one at
        inactive steps), ``advantages = R^(n) - V`` at active steps and 0 at inactive ones.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"nstep_returns: n={n!r}, expected an integer >= 1")
    with torch.no_grad():
        rewards, values, bootstrap_value, discounts, active = _prepare("nstep_returns", rewards, values,
                                                                       bootstrap_value, discounts, active)
        T = values.shape[0]
        every = bool(active.all())
        level = carry_through_inactive(values, bootstrap_value, rewards, discounts, active)  # R^(0), [T + 1, B]
        for _ in range(min(n, T)):  # past T levels nothing changes: every window already reaches T
            if every:
                level = torch.cat([rewards + discounts * level[1:], bootstrap_value.unsqueeze(0)], dim=0)
                continue
            nxt = torch.empty_like(level)
            nxt[T] = bootstrap_value
            for t in range(T - 1, -1, -1):
                nxt[t] = rewards[t] + discounts[t] * torch.where(active[t], level[t + 1], nxt[t + 1])
            level = nxt
        returns = level[:-1]
        advantages = torch.where(active, returns - values, torch.zeros_like(returns))
    return Targets(returns=returns, advantages=advantages)


def monte_carlo_returns(
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    discounts: torch.Tensor,
    active: torch.Tensor | None = None,
) -> Targets:
    """Discounted returns to the episode's end (or to the rollout's end, plus ``discount * V(x_T)``), time-major:
    ``G_T = V(x_T)``, ``G_t = r_t + discount_t * G_{t+1}`` at every step (an inactive step's carry is the same
    backup), ``advantages = G - V`` at active steps, 0 at inactive ones. Shapes and arguments as
    :func:`nstep_returns` (without ``n``). No gradient."""
    with torch.no_grad():
        rewards, values, bootstrap_value, discounts, active = _prepare("monte_carlo_returns", rewards, values,
                                                                       bootstrap_value, discounts, active)
        returns = torch.empty_like(values)
        acc = bootstrap_value
        for t in range(values.shape[0] - 1, -1, -1):
            acc = rewards[t] + discounts[t] * acc
            returns[t] = acc
        advantages = torch.where(active, returns - values, torch.zeros_like(returns))
    return Targets(returns=returns, advantages=advantages)
