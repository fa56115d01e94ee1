"""Soft Actor-Critic: the tanh-squashed Gaussian policy, the clipped double-Q target, the critic, actor and
temperature losses and the Polyak update of the target critics.

Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications" (arXiv:1812.05905), the version with
twin Q critics and a learned temperature. With ``Q_1, Q_2`` the critics, ``Q'_1, Q'_2`` their target copies,
``pi`` the policy and ``alpha`` the temperature:

    critic target (the soft Bellman backup with the soft value V(s') = E[Q(s', a') - alpha log pi(a'|s')],
    eqs. 2-3, and the minimum of the two target critics of the practical algorithm, Algorithm 1):
        y = r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s')),   a' ~ pi(.|s')
    critic loss (eq. 5), per critic:       J_Q(Q_i)  = E[ 1/2 (Q_i(s, a) - y)^2 ]
    actor loss (eq. 7 with the reparameterisation a = f(eps; s) of eqs. 8-9):
                                           J_pi      = E[ alpha log pi(a|s) - min_i Q_i(s, a) ]
    temperature loss (eq. 18):             J(alpha)  = E[ -alpha log pi(a|s) - alpha H_bar ]
    target networks (Algorithm 1):         Q'_i <- tau Q_i + (1 - tau) Q'_i

Squashing (appendix C, eq. 21): the policy samples ``u ~ N(mean, std)`` and acts ``tanh(u)``, whose log-density
subtracts ``sum_j log(1 - tanh(u_j)^2)``. Here the squashed value is further mapped affinely onto the env's
bounds ``[low, high]``, which subtracts the constant ``sum_j log((high_j - low_j) / 2)`` as well, so log-probs
are densities of the actions the env receives: they are never clipped to the bounds, they lie inside by
construction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

import torch
import torch.nn.functional as F

from sfx.algo.distributions import UnsupportedActionSpaceError

__all__ = [
    "SAC_LOG_STD_MIN",
    "SAC_LOG_STD_MAX",
    "SquashedGaussian",
    "SquashedSample",
    "CriticLoss",
    "check_action_bounds",
    "clipped_double_q_target",
    "critic_loss",
    "actor_loss",
    "temperature_loss",
    "default_target_entropy",
    "polyak_update_",
]

# The range of log_std in the SAC authors' code (softlearning's SCALE_DIAG_MIN_MAX = (-20, 2)): exp(-20) ~ 2e-9
# lets the policy become nearly deterministic where the squash saturates anyway, exp(2) ~ 7.4 is already
# nearly uniform after tanh. Outside it log_std gets no gradient. (sfx's unsquashed DiagGaussian for APPO uses
# [-5, 2]: there a tiny std gives huge log-probs and ratios; SAC's actor only sees log-probs through alpha.)
SAC_LOG_STD_MIN = -20.0
SAC_LOG_STD_MAX = 2.0

_LOG_2 = math.log(2.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _log1m_tanh_sq(u: torch.Tensor) -> torch.Tensor:
    """``log(1 - tanh(u)^2)``, finite for every finite ``u``: ``1 - tanh^2 = 4 e^{-2u} / (1 + e^{-2u})^2``, so
    ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``. (The naive form is ``log(0) = -inf`` once ``tanh``
    rounds to 1, already at ``|u| ~ 9`` in float32.)"""
    return 2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))


def _shape(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(x.shape)


def check_action_bounds(low: torch.Tensor, high: torch.Tensor) -> None:
    """Raise unless ``low``, ``high`` (``[d]``) are finite with ``low < high`` everywhere.

    Cheap on CPU tensors (an env's Box bounds); on a GPU it waits for the device, so an agent checks the
    bounds once here and builds its distributions with ``validate_args=False``. Infinite bounds raise
    ``UnsupportedActionSpaceError`` (a ``ValueError``): the squashed Gaussian maps onto a bounded interval.
    """
    low, high = torch.as_tensor(low), torch.as_tensor(high)
    if low.shape != high.shape:
        raise ValueError(f"action bounds: low has shape {_shape(low)}, high has shape {_shape(high)}; they must match")
    if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
        raise UnsupportedActionSpaceError(
            f"SAC needs finite action bounds, got low={low.tolist()}, high={high.tolist()}: the tanh-squashed "
            f"Gaussian maps onto [low, high]; wrap the env so its Box has finite bounds (e.g. rescale to [-1, 1])")
    bad = ~(low < high)
    if bad.any():
        idx = bad.nonzero().flatten().tolist()
        raise ValueError(f"action bounds: low < high is required in every dimension, got low={low.tolist()}, "
                         f"high={high.tolist()} (bad at index {idx})")


class SquashedSample(NamedTuple):
    """A reparameterised sample of a ``SquashedGaussian``."""

    action: torch.Tensor  # [n, d] in env units, inside [low, high]
    log_prob: torch.Tensor  # [n] log-density of ``action`` (change of variables included)


class SquashedGaussian:
    """A batch of ``n`` tanh-squashed diagonal Gaussians over ``d`` action dimensions, scaled onto the bounds.

    ``u ~ N(mean, exp(log_std)^2)`` (``[n, d]``), ``a = low + (tanh(u) + 1) / 2 * (high - low)``. By the
    change of variables (Haarnoja et al. 2018, appendix C, eq. 21, plus the affine map's constant Jacobian)

        log pi(a) = sum_j [ log N(u_j; mean_j, std_j) - log(1 - tanh(u_j)^2) - log((high_j - low_j) / 2) ]

    with ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))`` (finite for every finite ``u``).

    ``log_std`` is clamped to ``[SAC_LOG_STD_MIN, SAC_LOG_STD_MAX] = [-20, 2]`` (the SAC authors' range; SEED RL
    instead uses ``std = softplus(x) + 1e-3``). ``low``/``high`` are ``[d]`` (a scalar is broadcast); they are
    converted to ``mean``'s dtype and device.

    Args:
        mean: ``[n, d]`` mean of the pre-squash Gaussian.
        log_std: ``[n, d]`` log standard deviation, clamped as above.
        low, high: ``[d]`` the env's finite Box bounds.
        validate_args: check the bounds' values (``check_action_bounds``); shapes are always checked. Pass
            False on the hot path once the bounds were checked (the value check waits for a GPU).
    """

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor, low: torch.Tensor | float,
                 high: torch.Tensor | float, validate_args: bool = True) -> None:
        if mean.dim() != 2:
            raise ValueError(f"SquashedGaussian: mean must be [n, d], got shape {_shape(mean)}")
        if log_std.shape != mean.shape:
            raise ValueError(f"SquashedGaussian: log_std has shape {_shape(log_std)}, expected {_shape(mean)} "
                             f"like mean")
        d = mean.shape[1]
        low = torch.as_tensor(low, dtype=mean.dtype, device=mean.device)
        high = torch.as_tensor(high, dtype=mean.dtype, device=mean.device)
        for name, bound in (("low", low), ("high", high)):
            if bound.dim() == 0:
                continue
            if bound.shape != (d,):
                raise ValueError(f"SquashedGaussian: {name} has shape {_shape(bound)}, expected ({d},) (one bound per "
                                 f"action dimension) or a scalar")
        low, high = low.expand(d), high.expand(d)
        if validate_args:
            check_action_bounds(low, high)
        self.mean = mean
        self.log_std = torch.clamp(log_std, SAC_LOG_STD_MIN, SAC_LOG_STD_MAX)
        self.std = self.log_std.exp()
        self.low, self.high = low, high
        self.half_range = (high - low) / 2  # [d]
        self._log_half_range_sum = torch.log(self.half_range).sum()

    def _to_env(self, squashed: torch.Tensor) -> torch.Tensor:
        """``[-1, 1] -> [low, high]``; the clamp only absorbs a last-bit rounding of the affine map, never a
        sample of the distribution (``squashed`` is already inside ``[-1, 1]``)."""
        action = self.low + (squashed + 1.0) * self.half_range
        return torch.minimum(torch.maximum(action, self.low), self.high)

    def _log_prob_pre_squash(self, u: torch.Tensor) -> torch.Tensor:
        """``log pi(a)`` ``[n]`` for the pre-squash values ``u`` ``[n, d]`` (class docstring)."""
        z = (u - self.mean) / self.std
        log_normal = -0.5 * z**2 - self.log_std - _HALF_LOG_2PI
        return (log_normal - _log1m_tanh_sq(u)).sum(-1) - self._log_half_range_sum

    def rsample(self, generator: torch.Generator | None = None) -> SquashedSample:
        """A reparameterised sample: gradients flow from ``action`` and ``log_prob`` into ``mean`` and
        ``log_std`` (``u = mean + std * eps``, ``eps ~ N(0, I)`` drawn with ``generator``)."""
        eps = torch.randn(self.mean.shape, generator=generator, dtype=self.mean.dtype, device=self.mean.device)
        u = self.mean + self.std * eps
        return SquashedSample(action=self._to_env(torch.tanh(u)), log_prob=self._log_prob_pre_squash(u))

    def sample(self, generator: torch.Generator | None = None) -> SquashedSample:
        """``rsample`` without gradients (acting)."""
        with torch.no_grad():
            return self.rsample(generator)

    def mode(self) -> torch.Tensor:
        """The deterministic action ``[n, d]``: the squashed mean, ``low + (tanh(mean) + 1) / 2 (high - low)``
        (evaluation and ``sfx.enjoy``; not the mode of the squashed density, which can sit elsewhere)."""
        return self._to_env(torch.tanh(self.mean))

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """Log-density ``[n]`` of given env actions ``[n, d]`` (e.g. replayed ones).

        Inverts the map: ``y = 2 (a - low) / (high - low) - 1``, ``u = atanh(y)``. ``y`` is clamped to
        ``[-1 + eps, 1 - eps]`` with ``eps`` the dtype's machine epsilon, so an action on (or rounded onto) a
        bound gets the finite density of the nearest representable interior point instead of ``+-inf``/NaN;
        an action outside the bounds (density 0 in truth) is likewise evaluated at the bound. For a fresh
        sample, ``rsample``'s own ``log_prob`` is exact (it never inverts the squash).
        """
        if action.shape != self.mean.shape:
            raise ValueError(f"SquashedGaussian.log_prob: action has shape {_shape(action)}, expected "
                             f"{_shape(self.mean)} like mean")
        action = action.to(self.mean.dtype)
        eps = torch.finfo(self.mean.dtype).eps
        y = torch.clamp((action - self.low) / self.half_range - 1.0, -1.0 + eps, 1.0 - eps)
        return self._log_prob_pre_squash(torch.atanh(y))


def _check_unit_interval(fn: str, name: str, value: float) -> None:
    if isinstance(value, torch.Tensor):
        raise ValueError(f"{fn}: {name} must be a Python number in [0, 1], got a tensor")
    if not (0.0 <= value <= 1.0):  # also False for NaN
        raise ValueError(f"{fn}: {name}={value} is outside [0, 1]")


def _check_same_shape(fn: str, first: str, ref: torch.Tensor, **others: torch.Tensor) -> None:
    if ref.dim() != 1:
        raise ValueError(f"{fn}: {first} must be [B], got shape {_shape(ref)}")
    for name, x in others.items():
        if x.shape != ref.shape:
            raise ValueError(f"{fn}: {name} has shape {_shape(x)}, expected {_shape(ref)} like {first}")


def _scalar(fn: str, name: str, x: torch.Tensor | float) -> torch.Tensor | float:
    """A float or a 0-d / 1-element tensor (e.g. ``log_alpha.exp()``), detached."""
    if isinstance(x, torch.Tensor):
        if x.numel() != 1:
            raise ValueError(f"{fn}: {name} must be a scalar, got a tensor of shape {_shape(x)}")
        return x.detach().reshape(())
    if not (math.isfinite(float(x)) and float(x) >= 0.0):
        raise ValueError(f"{fn}: {name}={x} must be a finite number >= 0")
    return float(x)


def clipped_double_q_target(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    next_q1: torch.Tensor,
    next_q2: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor | float,
    gamma: float,
    discounts: torch.Tensor | None = None,
) -> torch.Tensor:
    """The soft clipped double-Q target ``y`` ``[B]`` of both critics (module docstring):

        y = r + gamma (1 - terminated) (min(next_q1, next_q2) - alpha next_log_prob)

    Terminations cut the bootstrap; truncations bootstrap like any other step: for a truncated transition
    the caller passes ``next_q1/next_q2/next_log_prob`` evaluated at the *stored final observation* of the
    episode (the env's ``final_observation``), not at the auto-reset's first observation. ``truncated`` thus
    does not change the formula; it is taken so the call site says which transitions those are, and a
    transition both terminated and truncated is cut (termination wins).

    n-step: pass ``rewards`` already summed over the window (``sum_{k<h} gamma^k r_{t+k}``), the next-state
    quantities at the window's bootstrap observation and ``discounts`` ``[B]``: the factor multiplying the
    bootstrap (``gamma^h``, 0 when a termination cut the window). They replace ``gamma``; ``(1 - terminated)``
    still multiplies them, so ``terminated`` may be the flag of any step of the window, or zeros (the
    discounts already hold the cut). ``sfx.algo.nstep.n_step_targets`` with zero ``next_values`` and
    ``trunc_values`` gives exactly these: its ``targets`` are the summed rewards, its ``discounts`` these
    factors, and with every step active the bootstrap observation is the one after step ``t + horizon - 1``
    (its stored final observation where that step was truncated). The entropy bonus enters only at the
    bootstrap (``- alpha log pi`` of the last state), not at the window's inner steps: their actions came from
    an older policy, whose log-probs the current one would have to re-evaluate.

    Args:
        rewards: ``[B]`` rewards (n-step: summed).
        terminated, truncated: ``[B]`` bool or 0/1 flags of the transition (n-step: of its window).
        next_q1, next_q2: ``[B]`` target critics at ``(s', a')``, ``a' ~ pi(.|s')`` from the current policy.
        next_log_prob: ``[B]`` ``log pi(a'|s')``.
        alpha: the temperature (float or scalar tensor; detached).
        gamma: discount in ``[0, 1]`` (checked; not used when ``discounts`` is given).
        discounts: ``[B]`` optional n-step bootstrap factors.

    Returns:
        ``y`` ``[B]``, detached (a regression target), in ``next_q1``'s dtype.
    """
    fn = "clipped_double_q_target"
    _check_unit_interval(fn, "gamma", gamma)
    _check_same_shape(fn, "rewards", rewards, terminated=terminated, truncated=truncated, next_q1=next_q1,
                      next_q2=next_q2, next_log_prob=next_log_prob,
                      **({} if discounts is None else {"discounts": discounts}))
    alpha = _scalar(fn, "alpha", alpha)
    with torch.no_grad():
        dtype = next_q1.dtype
        not_terminated = 1.0 - terminated.to(dtype)
        bootstrap_factor = gamma * not_terminated if discounts is None else discounts.to(dtype) * not_terminated
        soft_next_value = torch.minimum(next_q1, next_q2) - alpha * next_log_prob.to(dtype)
        return (rewards.to(dtype) + bootstrap_factor * soft_next_value).detach()


class CriticLoss(NamedTuple):
    """The twin critics' regression losses (scalars); ``loss = q1_loss + q2_loss`` is what the critics'
    optimizer minimises."""

    loss: torch.Tensor
    q1_loss: torch.Tensor
    q2_loss: torch.Tensor


def critic_loss(q1: torch.Tensor, q2: torch.Tensor, target: torch.Tensor,
                weights: torch.Tensor | None = None) -> CriticLoss:
    """``J_Q = E[1/2 (Q_i(s, a) - y)^2]`` for each critic (Haarnoja et al. 2018, eq. 5).

    ``q_i_loss = 0.5 * mean_b(w_b (q_i[b] - y[b])^2)`` and ``loss = q1_loss + q2_loss = 0.5 (mse_1 + mse_2)``:
    the paper's 1/2, the same total as Stable-Baselines3's ``0.5 * sum(mse_i)`` and as SEED RL's mean of the
    squared errors over both critics. ``target`` is detached.

    Args:
        q1, q2: ``[B]`` online critics at the stored ``(s, a)``.
        target: ``[B]`` ``clipped_double_q_target``.
        weights: ``[B]`` optional per-sample weights (prioritized replay's importance weights); the mean is
            over ``B``, not divided by the weights' sum.
    """
    _check_same_shape("critic_loss", "q1", q1, q2=q2, target=target,
                      **({} if weights is None else {"weights": weights}))
    target = target.detach()
    w = None if weights is None else weights.detach().to(q1.dtype)

    def half_mse(q: torch.Tensor) -> torch.Tensor:
        sq = (q - target) ** 2
        return 0.5 * (sq if w is None else w * sq).mean()

    q1_loss, q2_loss = half_mse(q1), half_mse(q2)
    return CriticLoss(loss=q1_loss + q2_loss, q1_loss=q1_loss, q2_loss=q2_loss)


def actor_loss(log_prob: torch.Tensor, q1_pi: torch.Tensor, q2_pi: torch.Tensor,
               alpha: torch.Tensor | float) -> torch.Tensor:
    """``J_pi = mean(alpha log pi(a|s) - min(Q_1(s, a), Q_2(s, a)))`` with ``a`` reparameterised
    (Haarnoja et al. 2018, eqs. 7-9; the minimum of the two critics as in their Algorithm 1).

    Gradients flow through ``log_prob`` and, via ``a``, through ``q1_pi``/``q2_pi`` into the actor;
    ``alpha`` is detached. The critics' parameters also receive gradients from this loss: the caller steps
    only the actor's optimizer with it (and zeroes the critics' gradients before their own step).

    Args:
        log_prob: ``[B]`` ``log pi(a|s)`` of ``a = SquashedGaussian(...).rsample()``.
        q1_pi, q2_pi: ``[B]`` online critics at ``(s, a)``.
        alpha: the temperature (float or scalar tensor).
    Returns:
        The scalar loss.
    """
    _check_same_shape("actor_loss", "log_prob", log_prob, q1_pi=q1_pi, q2_pi=q2_pi)
    alpha = _scalar("actor_loss", "alpha", alpha)
    return (alpha * log_prob - torch.minimum(q1_pi, q2_pi)).mean()


def temperature_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """``-mean(log_alpha * (log pi(a|s) + H_bar))``, ``log_prob`` detached: the temperature's loss.

    The paper's eq. 18 is ``J(alpha) = E[-alpha log pi - alpha H_bar]``, linear in ``alpha``. Here ``log alpha``
    is the optimised variable and multiplies the same factor, as in the SAC authors' code (softlearning) and
    Stable-Baselines3: the gradient ``-(log pi + H_bar)`` has the sign of eq. 18's, so the fixed point is the
    same, but its size no longer scales with ``alpha``, so a step moves alpha by a similar *factor* whether it
    is 1 or 1e-3, and ``alpha = exp(log_alpha)`` stays positive. (SEED RL multiplies ``alpha`` itself, by
    ``mean(entropy) - H_bar``, i.e. eq. 18.) When the policy's entropy ``-E[log pi]`` is below the target, the
    gradient on ``log_alpha`` is negative and a descent step raises alpha (more entropy bonus), and vice versa.

    Args:
        log_alpha: scalar (0-d or 1-element) tensor, usually a parameter with ``requires_grad``.
        log_prob: ``[B]`` ``log pi(a|s)`` of fresh actions from the current policy (detached here).
        target_entropy: ``H_bar``, e.g. ``default_target_entropy(d)``.
    Returns:
        The scalar loss.
    """
    if not isinstance(log_alpha, torch.Tensor) or log_alpha.numel() != 1:
        raise ValueError(f"temperature_loss: log_alpha must be a scalar tensor, got {log_alpha!r}")
    if log_prob.dim() != 1:
        raise ValueError(f"temperature_loss: log_prob must be [B], got shape {_shape(log_prob)}")
    if not math.isfinite(float(target_entropy)):
        raise ValueError(f"temperature_loss: target_entropy={target_entropy} must be finite")
    return -(log_alpha.reshape(()) * (log_prob.detach() + float(target_entropy))).mean()


def default_target_entropy(action_dim: int) -> float:
    """``H_bar = -dim(A)``, the paper's heuristic (Haarnoja et al. 2018, appendix D's hyperparameters)."""
    if isinstance(action_dim, bool) or not isinstance(action_dim, int) or action_dim < 1:
        raise ValueError(f"default_target_entropy: action_dim={action_dim!r} must be a positive int")
    return -float(action_dim)


def _pairs(target: torch.nn.Module | Iterable[torch.Tensor], online: torch.nn.Module | Iterable[torch.Tensor]
           ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """(averaged targets, averaged sources, copied targets, copied sources)."""
    if isinstance(target, torch.nn.Module) != isinstance(online, torch.nn.Module):
        raise ValueError("polyak_update_: pass two nn.Modules or two iterables of tensors, not one of each")
    if isinstance(target, torch.nn.Module):
        avg_t, avg_o = list(target.parameters()), list(online.parameters())
        copy_t, copy_o = list(target.buffers()), list(online.buffers())
    else:
        avg_t, avg_o, copy_t, copy_o = list(target), list(online), [], []
    for kind, t_list, o_list in (("parameters", avg_t, avg_o), ("buffers", copy_t, copy_o)):
        if len(t_list) != len(o_list):
            raise ValueError(f"polyak_update_: the target has {len(t_list)} {kind}, the online network {len(o_list)}")
        for i, (t, o) in enumerate(zip(t_list, o_list)):
            if t.shape != o.shape:
                raise ValueError(f"polyak_update_: {kind} #{i} has shape {_shape(t)} in the target, {_shape(o)} "
                                 f"in the online network")
    # integer / bool tensors (counters, masks) have no average: copied
    floating = [t.is_floating_point() or t.is_complex() for t in avg_t]
    avg = [(t, o) for t, o, f in zip(avg_t, avg_o, floating) if f]
    copied = list(zip(copy_t, copy_o)) + [(t, o) for t, o, f in zip(avg_t, avg_o, floating) if not f]
    return [t for t, _ in avg], [o for _, o in avg], [t for t, _ in copied], [o for _, o in copied]


def polyak_update_(target: torch.nn.Module | Iterable[torch.Tensor], online: torch.nn.Module | Iterable[torch.Tensor],
                   tau: float) -> None:
    """In place, without gradients: ``target <- (1 - tau) target + tau online`` (Haarnoja et al. 2018,
    Algorithm 1; SEED RL's ``--polyak`` is ``1 - tau``).

    ``target``/``online``: two ``nn.Module`` s of the same architecture, or two iterables of tensors in the
    same order. With modules, parameters are averaged and buffers (e.g. running statistics of a normaliser or
    batch norm) are *copied*: the target network should normalise its inputs like the online one, and
    counters cannot be averaged. With iterables, every floating tensor is averaged and integer / bool
    tensors are copied. ``tau = 1`` copies exactly, ``tau = 0`` leaves the target untouched; otherwise one
    ``torch._foreach_lerp_`` per (device, dtype) group (``lerp`` is ``t + tau (o - t)``).
    """
    if isinstance(tau, torch.Tensor) or not isinstance(tau, (int, float)) or not (0.0 <= tau <= 1.0):
        raise ValueError(f"polyak_update_: tau={tau!r} is outside [0, 1] (1 copies the online weights, "
                         f"0 keeps the target; the usual value is 0.005)")
    avg_t, avg_o, copy_t, copy_o = _pairs(target, online)
    with torch.no_grad():
        for t, o in zip(copy_t, copy_o):
            t.copy_(o)
        if tau == 0.0:
            return
        if tau == 1.0:
            for t, o in zip(avg_t, avg_o):
                t.copy_(o)
            return
        groups: dict[tuple[torch.device, torch.dtype], tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        for t, o in zip(avg_t, avg_o):
            ts, os_ = groups.setdefault((t.device, t.dtype), ([], []))
            ts.append(t)
            os_.append(o.to(device=t.device, dtype=t.dtype))
        for ts, os_ in groups.values():
            if hasattr(torch, "_foreach_lerp_"):
                torch._foreach_lerp_(ts, os_, float(tau))
            else:  # pragma: no cover - older torch
                for t, o in zip(ts, os_):
                    t.lerp_(o, float(tau))
