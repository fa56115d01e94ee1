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
"""

from __future__ import annotations

import torch

from sfx.algo._shapes import check_time_major, discounted_backward_scan
from sfx.algo.targets import Targets

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
) -> Targets:
    """V-trace targets ``vs`` and policy-gradient advantages, time-major.

    Args:
        log_rhos: ``[T, B]`` log importance ratios ``log pi(a_t|x_t) - log mu(a_t|x_t)``
            (target policy ``pi``, behaviour policy ``mu``).
        discounts: ``[T, B]`` per-step discount ``gamma * (1 - done_t)``; 0 where an episode ended.
        rewards: ``[T, B]`` rewards ``r_t``.
        values: ``[T, B]`` value estimates ``V(x_t)``.
        bootstrap_value: ``[B]`` value estimate ``V(x_T)`` after the last step.
        clip_rho_threshold: ``rho_bar`` for the value-target deltas; ``None`` = no clipping.
        clip_pg_rho_threshold: clip for the ratio weighting the policy-gradient advantage;
            ``None`` = no clipping.
        lambda_: trace-cutting factor multiplying every ``c_t`` (1.0 = plain V-trace).
        clip_c_threshold: ``c_bar`` for the trace coefficients; ``None`` = no clipping.

    Returns:
        ``Targets(returns=vs, advantages=pg_advantages)``, both ``[T, B]`` with the dtype of
        ``values``. No gradient flows through either (they are regression / advantage targets).
    """
    check_time_major("vtrace", values, bootstrap_value, log_rhos=log_rhos, discounts=discounts, rewards=rewards)

    with torch.no_grad():
        log_rhos, discounts, rewards = log_rhos.detach(), discounts.detach(), rewards.detach()
        values, bootstrap_value = values.detach(), bootstrap_value.detach()

        rhos = torch.exp(log_rhos)
        clipped_rhos = _clip_above(rhos, clip_rho_threshold)
        cs = lambda_ * _clip_above(rhos, clip_c_threshold)

        values_tp1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
        deltas = clipped_rhos * (rewards + discounts * values_tp1 - values)
        decay = discounts * cs

        vs_minus_v = discounted_backward_scan(deltas, decay)
        vs = values + vs_minus_v

        vs_tp1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
        clipped_pg_rhos = _clip_above(rhos, clip_pg_rho_threshold)
        pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_tp1 - values)

    return Targets(returns=vs, advantages=pg_advantages)
