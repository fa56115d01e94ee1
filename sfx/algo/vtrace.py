"""V-trace off-policy value targets and policy-gradient advantages.

Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
Actor-Learner Architectures", section 4.1, eq. 1.

For a trajectory of length ``n`` starting at ``s`` the V-trace target is

    v_s = V(x_s) + sum_{t=s}^{s+n-1} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t V
    delta_t V = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))
    rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t)),   c_i = lambda * min(c_bar, pi(a_i|x_i) / mu(a_i|x_i))

Here the constant ``gamma`` becomes a per-step ``discount_t`` (``gamma * (1 - done_t)``), so the
power ``gamma^{t-s}`` is the product ``prod_{i=s}^{t-1} discount_i`` and an episode end cuts the sum.
The sum is evaluated as a backward recursion (paper, remark 1), with ``vs_minus_v[T] = 0``:

    vs_minus_v[t] = delta_t + discount_t * c_t * vs_minus_v[t + 1]
    vs[t]         = V(x_t) + vs_minus_v[t]

and the policy-gradient advantage (paper, section 4.2) is

    pg_advantages[t] = clip_pg_rho_t * (r_t + discount_t * vs[t + 1] - V(x_t)),   vs[T] = bootstrap_value

``lambda_`` multiplies the trace coefficients ``c`` (as in trfl / rlax); it does not enter the
policy-gradient bootstrap, which always uses ``vs[t + 1]``.

Inactive steps (``active_t`` False; ``sfx.algo.targets`` explains why and how) are transparent: with
``V~`` and ``vs~`` the values and targets carried back through them (``carry_through_inactive``, the
bootstrap at ``T``, ``vs_minus_v[T] = 0``),

    active t:    delta_t       = rho_t (r_t + discount_t V~[t + 1] - V(x_t))
                 vs_minus_v[t] = delta_t + discount_t * c_t * vs_minus_v[t + 1]
                 vs[t]         = V(x_t) + vs_minus_v[t]
                 pg_advantages[t] = clip_pg_rho_t * (r_t + discount_t * vs~[t + 1] - V(x_t))
    inactive t:  vs_minus_v[t] = discount_t * vs_minus_v[t + 1]
                 vs[t]         = V~[t] + vs_minus_v[t]     (= vs~[t]: the carried target)
                 pg_advantages[t] = 0

with ``vs~ = V~ + vs_minus_v`` (the rewards of the inactive steps cancel in ``vs~ - V~``). So an active
step's target is the one of the same trajectory with its inactive steps removed, their rewards added to
the active step before them; neither the values nor the ratios of inactive steps enter it. With every
step active this is the recursion above, to the bit.
"""

from __future__ import annotations

import torch

from sfx.algo._shapes import check_time_major, discounted_backward_scan
from sfx.algo.targets import Targets, carry_through_inactive

__all__ = ["vtrace"]


def _clip_above(x: torch.Tensor, threshold: float | None) -> torch.Tensor:
    """``min(threshold, x)``; ``None`` means no clipping."""
    return x if threshold is None else torch.clamp(x, max=float(threshold))


def vtrace(
    log_rhos: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    lambda_: float = 1.0,
    clip_c_threshold: float | None = 1.0,
    active: torch.Tensor | None = None,
) -> Targets:
    """V-trace targets ``vs`` and policy-gradient advantages, time-major.

    Args:
        log_rhos: ``[T, B]`` log importance ratios ``log pi(a_t|x_t) - log mu(a_t|x_t)``
            (target policy ``pi``, behaviour policy ``mu``).
        discounts: ``[T, B]`` per-step discount ``gamma * (1 - done_t)``; 0 where an episode ended. At an
            inactive step, the factor the next active step's quantities are carried back with
            (``appo_targets``: ``1 - done_t``).
        rewards: ``[T, B]`` rewards ``r_t``.
        values: ``[T, B]`` value estimates ``V(x_t)``.
        bootstrap_value: ``[B]`` value estimate ``V(x_T)`` after the last step.
        clip_rho_threshold: ``rho_bar`` for the value-target deltas; ``None`` = no clipping.
        clip_pg_rho_threshold: clip for the ratio weighting the policy-gradient advantage;
            ``None`` = no clipping.
        lambda_: trace-cutting factor multiplying every ``c_t`` (1.0 = plain V-trace).
        clip_c_threshold: ``c_bar`` for the trace coefficients; ``None`` = no clipping.
        active: ``[T, B]`` bool, False at the agent's inactive steps (transparent, module docstring);
            ``None``: every step is active.

    Returns:
        ``Targets(returns=vs, advantages=pg_advantages)``, both ``[T, B]`` with the dtype of
        ``values``; at inactive steps the carried target and 0. No gradient flows through either
        (they are regression / advantage targets).
    """
    check_time_major("vtrace", values, bootstrap_value, log_rhos=log_rhos, discounts=discounts, rewards=rewards,
                     **({} if active is None else {"active": active}))

    with torch.no_grad():
        log_rhos, discounts, rewards = log_rhos.detach(), discounts.detach(), rewards.detach()
        values, bootstrap_value = values.detach(), bootstrap_value.detach()

        if active is None:
            active = torch.ones_like(values, dtype=torch.bool)
        active = active.to(device=values.device, dtype=torch.bool)

        rhos = torch.exp(log_rhos)
        clipped_rhos = _clip_above(rhos, clip_rho_threshold)
        cs = lambda_ * _clip_above(rhos, clip_c_threshold)

        carried_values = carry_through_inactive(values, bootstrap_value, rewards, discounts, active)  # V~ [T+1, B]
        deltas = clipped_rhos * (rewards + discounts * carried_values[1:] - values)
        deltas = torch.where(active, deltas, torch.zeros_like(deltas))
        decay = torch.where(active, discounts * cs, discounts)

        vs_minus_v = discounted_backward_scan(deltas, decay)
        vs = carried_values[:-1] + vs_minus_v  # V~[t] = V(x_t) at active steps

        vs_tp1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)  # vs~[t + 1]
        clipped_pg_rhos = _clip_above(rhos, clip_pg_rho_threshold)
        pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_tp1 - values)
        pg_advantages = torch.where(active, pg_advantages, torch.zeros_like(pg_advantages))

    return Targets(returns=vs, advantages=pg_advantages)
