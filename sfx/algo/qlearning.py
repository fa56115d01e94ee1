"""Recurrent distributed Q-learning (R2D2) and distributed prioritized replay (Ape-X): the pure pieces.

- Value rescaling ``h`` and its exact inverse (Pohlen et al. 2018, "Observe and Look Further: Achieving
  Consistent Performance on Atari", section 3.2 and proposition A.2; R2D2, Kapturowski et al. 2019,
  "Recurrent Experience Replay in Distributed Reinforcement Learning", section 2.3 and table 2).
- n-step double-Q targets (van Hasselt et al. 2016, "Deep Reinforcement Learning with Double Q-learning",
  eq. 4; with n-step returns and ``h`` as in R2D2 section 2.3):

      a*_t     = argmax_a Q_online(x_{t+1}, a)
      V_t      = h^-1(Q_target(x_{t+1}, a*_t))                  (the bootstrap value, reward scale)
      y_t      = h(G_t),  G_t the n-step return of ``sfx.algo.nstep`` bootstrapping from ``V``

- Sequence priorities ``p = eta max_t |delta_t| + (1 - eta) mean_t |delta_t|`` (R2D2 section 2.3, eta 0.9).
- Importance-sampling weights ``w_i = (N P(i))^-beta / max_j w_j`` (Schaul et al. 2016, "Prioritized
  Experience Replay", section 3.4; beta 0.6 in R2D2 table 2).
- Per-actor exploration ``epsilon_i = base^(1 + alpha i / (N - 1))`` (Ape-X, Horgan et al. 2018,
  "Distributed Prioritized Experience Replay", section 4.1; base 0.4, alpha 7).
- Reward scaling ``r = clip(reward_scale * reward, -reward_clip, reward_clip)``: ``--reward_scale`` and
  ``--reward_clip`` in APPO's meaning and unit (``sfx.algo.appo``'s ``r_t``), for every agent that reads them.
- The R2D2 loss: importance-weighted squared TD errors (SEED RL's R2D2 learner: ``0.5 delta^2`` summed over
  the sequence's steps, weighted by the sequence's importance weight, averaged over the batch).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from sfx.algo.targets import scale_rewards

from sfx.algo.nstep import check_batch_major, check_gamma_n, n_step_targets

__all__ = [
    "DoubleQTargets",
    "R2D2Loss",
    "actor_epsilons",
    "double_q_targets",
    "importance_weights",
    "r2d2_loss",
    "scale_rewards",
    "sequence_priorities",
    "td_errors",
    "value_rescale",
    "value_rescale_inverse",
]


def _check_eps(fn: str, eps: float) -> None:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not float(eps) > 0.0 or eps == float("inf"):
        raise ValueError(f"{fn}: eps={eps!r}; the rescaling epsilon must be a finite number > 0")


def _check_unit(fn: str, name: str, x: float) -> None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0.0 <= float(x) <= 1.0:
        raise ValueError(f"{fn}: {name}={x!r}; must be a number in [0, 1]")


# ----------------------------------------------------------------------------------------------------------
# Value rescaling
# ----------------------------------------------------------------------------------------------------------


def value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """``h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x`` (Pohlen et al. 2018, section 3.2), elementwise.

    Evaluated as ``x / (sqrt(|x| + 1) + 1) + eps x``, the same function without the cancellation of
    ``sqrt(|x| + 1) - 1`` near 0 (relative error of a few ulp everywhere). Differentiable.

    Args:
        x: any shape, floating point.
        eps: > 0; the linear term keeps ``h^-1`` Lipschitz (R2D2: 1e-3).
    """
    _check_eps("value_rescale", eps)
    return x / (torch.sqrt(x.abs() + 1.0) + 1.0) + eps * x


def value_rescale_inverse(y: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """The exact inverse of ``value_rescale`` (Pohlen et al. 2018, proposition A.2), elementwise:

        h^-1(y) = sign(y) ( ((sqrt(1 + 4 eps (|y| + 1 + eps)) - 1) / (2 eps))^2 - 1 )

    With ``s = sqrt(1 + 4 eps (|y| + 1 + eps))`` and ``u = (s - 1) / (2 eps)`` the bracket is ``(u - 1)(u + 1)``,
    and since ``s^2 = (1 + 2 eps)^2 + 4 eps |y|``, ``u - 1 = 2 |y| / (1 + 2 eps + s)`` and
    ``u = 2 (|y| + 1 + eps) / (s + 1)``: the same closed form, evaluated without its two cancellations
    (``s - 1`` and ``u^2 - 1``, which in float32 cost ~1e-4 absolute near 0). Differentiable.

    Args:
        y: any shape, floating point (a rescaled value).
        eps: > 0, the one ``value_rescale`` used.
    """
    _check_eps("value_rescale_inverse", eps)
    a = y.abs()
    s = torch.sqrt(1.0 + 4.0 * eps * (a + 1.0 + eps))
    u_plus_1 = 2.0 * (a + 1.0 + eps) / (s + 1.0) + 1.0
    u_minus_1 = 2.0 * a / (1.0 + 2.0 * eps + s)
    return torch.sign(y) * u_minus_1 * u_plus_1


# ----------------------------------------------------------------------------------------------------------
# Targets and loss
# ----------------------------------------------------------------------------------------------------------


class DoubleQTargets(NamedTuple):
    """n-step double-Q targets, all ``[B, T]``.

    Attributes:
        targets: ``h(G_t)`` with rescaling (what ``Q_online(x_t, a_t)`` regresses to), ``G_t`` without.
        returns: ``G_t``, the n-step return in reward scale (for summaries).
        discounts: the power of gamma multiplying the bootstrap (0 where a termination cut the window).
        horizon: int64, the agent's steps whose rewards were summed.
    """

    targets: torch.Tensor
    returns: torch.Tensor
    discounts: torch.Tensor
    horizon: torch.Tensor


def _double_q_values(fn: str, name: str, online_q: torch.Tensor, target_q: torch.Tensor, shape: torch.Size,
                     eps: float, rescale: bool) -> torch.Tensor:
    """``h^-1(Q_target(x, argmax_a Q_online(x, a)))`` ``[B, T]`` from ``[B, T, A]`` Q-values."""
    if online_q.dim() != 3 or online_q.shape[:2] != shape:
        raise ValueError(f"{fn}: online_{name} has shape {tuple(online_q.shape)}, expected [B, T, A] with "
                         f"[B, T] = {tuple(shape)} like rewards")
    if target_q.shape != online_q.shape:
        raise ValueError(f"{fn}: target_{name} has shape {tuple(target_q.shape)}, expected "
                         f"{tuple(online_q.shape)} like online_{name}")
    best = online_q.argmax(dim=-1, keepdim=True)
    value = target_q.gather(-1, best).squeeze(-1)
    return value_rescale_inverse(value, eps) if rescale else value


def double_q_targets(rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor,
                     online_next_q: torch.Tensor, target_next_q: torch.Tensor, target_trunc_q: torch.Tensor,
                     online_trunc_q: torch.Tensor, gamma: float, n: int, eps: float = 1e-3, rescale: bool = True,
                     active: torch.Tensor | None = None) -> DoubleQTargets:
    """n-step double-Q targets with value rescaling (module docstring; R2D2 section 2.3), batch-major.

    The Q tensors of slot ``t`` are those of the observation *after* step ``t`` (``x_{t+1}``; with a network
    unrolled over the ``T + 1`` observations ``x_0 .. x_T`` of a sequence, ``q[:, 1:]``). The ``*_trunc_q``
    ones are those of the final observation of step ``t`` where ``t`` was truncated (the ``x_{t+1}`` slot then
    holds the next episode's first observation); elsewhere they are not read and may hold anything.

    Args:
        rewards: ``[B, T]`` rewards ``r_t``.
        terminated: ``[B, T]`` bool, step ``t`` ended its episode.
        truncated: ``[B, T]`` bool, a time limit cut the episode at step ``t``.
        online_next_q: ``[B, T, A]`` online network's ``Q(x_{t+1}, .)``: picks the bootstrap action.
        target_next_q: ``[B, T, A]`` target network's ``Q(x_{t+1}, .)``: values it.
        target_trunc_q: ``[B, T, A]`` target network's Q of the final observation of a truncated step.
        online_trunc_q: ``[B, T, A]`` online network's Q of the final observation of a truncated step.
        gamma: discount in [0, 1] (R2D2: 0.997).
        n: the n of the n-step return, >= 1 (R2D2: 5).
        eps: the rescaling epsilon, > 0 (R2D2: 1e-3).
        rescale: True: the networks' Q-values are in ``h`` space (inverted before the return, ``h`` applied
            after); False: plain n-step double-Q targets.
        active: ``[B, T]`` bool or ``None``, the agent's active steps (``n_step_targets``).

    Returns:
        ``DoubleQTargets(targets, returns, discounts, horizon)``, each ``[B, T]``. No gradient flows.

    Raises:
        ValueError: bad ``gamma`` / ``n`` / ``eps``, or shapes that do not match ``rewards`` ``[B, T]``.
    """
    fn = "double_q_targets"
    check_gamma_n(fn, gamma, n)
    _check_eps(fn, eps)
    check_batch_major(fn, rewards=rewards, terminated=terminated, truncated=truncated, active=active)
    with torch.no_grad():
        next_values = _double_q_values(fn, "next_q", online_next_q.detach(), target_next_q.detach(),
                                       rewards.shape, eps, rescale)
        trunc_values = _double_q_values(fn, "trunc_q", online_trunc_q.detach(), target_trunc_q.detach(),
                                        rewards.shape, eps, rescale)
        out = n_step_targets(rewards, terminated, truncated, next_values, trunc_values, gamma, n, active=active)
        targets = value_rescale(out.targets, eps) if rescale else out.targets
    return DoubleQTargets(targets=targets, returns=out.targets, discounts=out.discounts, horizon=out.horizon)


def td_errors(q_taken: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``delta_t = y_t - Q(x_t, a_t)``, ``[B, T]`` (target minus prediction; gradients flow through
    ``q_taken`` only, ``targets`` is detached)."""
    check_batch_major("td_errors", q_taken=q_taken, targets=targets)
    return targets.detach() - q_taken


class R2D2Loss(NamedTuple):
    """The R2D2 loss of a batch of sequences.

    Attributes:
        loss: scalar, ``mean_b w_b * 0.5 * sum_t valid_{b,t} delta_{b,t}^2``.
        td_abs: ``[B, T]`` ``|delta|`` detached, 0 at invalid steps (for ``sequence_priorities``, summaries).
    """

    loss: torch.Tensor
    td_abs: torch.Tensor


def r2d2_loss(td: torch.Tensor, valids: torch.Tensor, weights: torch.Tensor | None = None) -> R2D2Loss:
    """Importance-weighted squared TD loss of R2D2, as SEED RL's R2D2 learner computes it: per sequence half
    the sum of squared TD errors over its valid steps, times the sequence's importance weight, averaged over
    the ``B`` sequences. (R2D2 and Ape-X state no Huber loss for this; SEED uses the squared one.)

    Args:
        td: ``[B, T]`` TD errors (``td_errors``), with gradient.
        valids: ``[B, T]`` bool, the steps that count (after burn-in, active, within the policy lag).
        weights: ``[B]`` importance-sampling weights (``importance_weights``), or ``None`` for all ones.

    Returns:
        ``R2D2Loss(loss, td_abs)``.
    """
    fn = "r2d2_loss"
    B, _ = check_batch_major(fn, td=td, valids=valids)
    valid = valids.to(device=td.device, dtype=torch.bool)
    if weights is not None and tuple(weights.shape) != (B,):
        raise ValueError(f"{fn}: weights has shape {tuple(weights.shape)}, expected ({B},): one per sequence of td")
    masked = torch.where(valid, td, torch.zeros_like(td))
    per_sequence = 0.5 * masked.square().sum(dim=1)
    if weights is not None:
        per_sequence = per_sequence * weights.detach().to(per_sequence.dtype)
    return R2D2Loss(loss=per_sequence.mean(), td_abs=masked.detach().abs())


# ----------------------------------------------------------------------------------------------------------
# Prioritized replay: priorities and importance weights
# ----------------------------------------------------------------------------------------------------------


def sequence_priorities(td_abs: torch.Tensor, valids: torch.Tensor, eta: float = 0.9) -> torch.Tensor:
    """R2D2's sequence priority (section 2.3): ``eta max_t |delta_t| + (1 - eta) mean_t |delta_t|`` over each
    sequence's valid steps; 0 for a sequence without any.

    Args:
        td_abs: ``[B, T]`` TD errors (their absolute values are taken).
        valids: ``[B, T]`` bool, the steps that count.
        eta: in [0, 1] (R2D2: 0.9).

    Returns:
        ``[B]`` priorities, >= 0, no gradient.
    """
    fn = "sequence_priorities"
    _check_unit(fn, "eta", eta)
    check_batch_major(fn, td_abs=td_abs, valids=valids)
    with torch.no_grad():
        valid = valids.to(device=td_abs.device, dtype=torch.bool)
        a = torch.where(valid, td_abs.detach().abs(), torch.zeros_like(td_abs))
        count = valid.sum(dim=1)
        mean = a.sum(dim=1) / count.clamp(min=1).to(a.dtype)
        return eta * a.amax(dim=1) + (1.0 - eta) * mean


def importance_weights(probabilities: torch.Tensor, size: int, beta: float = 0.6) -> torch.Tensor:
    """Importance-sampling weights of a prioritized sample (Schaul et al. 2016, section 3.4):

        w_i = (size * P(i))^-beta / max_j (size * P(j))^-beta

    with the max over the *sampled batch*, as SEED RL's prioritized replay (``common/utils.py``) normalises
    (Schaul et al. 2016, algorithm 1, write ``/ max_i w_i`` without saying over what; a max over the whole
    buffer would give smaller weights whenever the buffer's least likely item is not in the batch). With the
    batch max ``size`` cancels
    (``w_i = (min_j P(j) / P(i))^beta``), which is how it is evaluated; the largest weight is 1.

    Args:
        probabilities: ``[k]`` the probabilities ``P(i)`` the sampled items were drawn with, in (0, 1].
        size: the number of items the sample was drawn from, >= 1.
        beta: in [0, 1]; 0 = no correction (all ones), 1 = full correction (R2D2: 0.6).

    Returns:
        ``[k]`` weights in (0, 1], dtype of ``probabilities``, no gradient.

    Raises:
        ValueError: ``size`` < 1, ``beta`` outside [0, 1], ``probabilities`` not 1-D, empty, or not in (0, 1].
    """
    fn = "importance_weights"
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"{fn}: size={size!r}; the number of items sampled from must be an integer >= 1")
    _check_unit(fn, "beta", beta)
    if probabilities.dim() != 1 or probabilities.numel() == 0:
        raise ValueError(f"{fn}: probabilities has shape {tuple(probabilities.shape)}, expected a non-empty [k]")
    p = probabilities.detach()
    if not bool(((p > 0) & (p <= 1)).all()):
        bad = p[~((p > 0) & (p <= 1))][0].item()
        raise ValueError(f"{fn}: probability {bad!r}; a sampled item's probability must be in (0, 1]")
    return (p.min() / p) ** beta


# ----------------------------------------------------------------------------------------------------------
# Exploration
# ----------------------------------------------------------------------------------------------------------


def actor_epsilons(num_actors: int, base: float = 0.4, alpha: float = 7.0,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Ape-X's per-actor exploration rates (Horgan et al. 2018, section 4.1; R2D2 and SEED RL use them too):

        epsilon_i = base^(1 + alpha * i / (N - 1)),   i = 0 .. N - 1

    from ``base`` (actor 0, the most exploring) down to ``base^(1 + alpha)`` (actor N - 1). A single actor
    (``N = 1``, where ``i / (N - 1)`` is undefined) gets ``base``, as SEED RL's ``linspace(1, 8, 1)`` gives.

    Args:
        num_actors: N >= 1.
        base: in [0, 1] (0.4).
        alpha: >= 0 (7).
        dtype: floating dtype of the result.

    Returns:
        ``[N]`` epsilons, non-increasing in ``i``.
    """
    fn = "actor_epsilons"
    if isinstance(num_actors, bool) or not isinstance(num_actors, int) or num_actors < 1:
        raise ValueError(f"{fn}: num_actors={num_actors!r}; must be an integer >= 1")
    _check_unit(fn, "base", base)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= float(alpha) < float("inf"):
        raise ValueError(f"{fn}: alpha={alpha!r}; must be a finite number >= 0")
    i = torch.arange(num_actors, dtype=torch.float64)
    exponent = 1.0 + alpha * i / (num_actors - 1) if num_actors > 1 else torch.ones(1, dtype=torch.float64)
    return (float(base) ** exponent).to(dtype)
