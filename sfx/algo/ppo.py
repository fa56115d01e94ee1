"""PPO loss terms (Schulman et al. 2017, "Proximal Policy Optimization Algorithms").

Every term is a masked mean over the samples marked valid, so samples dropped for policy lag or
padding never count, and a minibatch with no valid sample gives 0 instead of NaN.
"""

from __future__ import annotations

import torch

__all__ = ["masked_mean", "ppo_policy_loss", "ppo_value_loss", "entropy_loss", "symmetric_kl_loss", "kl_loss",
           "ppo_policy_no_gradient", "ppo_value_no_gradient"]


def masked_mean(x: torch.Tensor, valids: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``valids`` is true.

    Args:
        x: any shape.
        valids: bool (or 0/1) tensor broadcastable to ``x``; ``None`` = all valid.

    Returns:
        A scalar tensor; 0 when no entry is valid. Invalid entries are excluded even when they
        hold inf or NaN.
    """
    if valids is None:
        return x.mean()
    mask = valids.bool().expand_as(x)
    total = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum()
    count = mask.sum().clamp(min=1)
    return total / count


def ppo_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_ratio: float,
    valids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped surrogate objective, as a loss to minimise.

        ratio = exp(log_prob - old_log_prob)
        loss  = -mean(min(ratio * A, clamp(ratio, 1 - clip_ratio, 1 + clip_ratio) * A))

    Args:
        log_prob: ``[...]`` log pi(a|x) under the current parameters (carries the gradient).
        old_log_prob: ``[...]`` log mu(a|x) of the behaviour policy (treated as a constant).
        advantages: ``[...]`` advantage estimates (treated as constants).
        clip_ratio: the PPO epsilon, > 0.
        valids: optional mask, same shape.

    Returns:
        ``(loss, ratio)``: scalar loss and the per-sample ratio ``[...]``.
    """
    if not clip_ratio > 0:
        raise ValueError(f"ppo_policy_loss: clip_ratio={clip_ratio!r}, expected a number > 0")
    ratio = torch.exp(log_prob - old_log_prob.detach())
    advantages = advantages.detach()
    surrogate = ratio * advantages
    surrogate_clipped = torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio) * advantages
    loss = -masked_mean(torch.min(surrogate, surrogate_clipped), valids)
    return loss, ratio


def ppo_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    targets: torch.Tensor,
    clip_value: float | None,
    valids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Squared-error value loss, optionally clipped around the behaviour policy's values.

        v_clipped = old + clamp(v - old, -clip_value, clip_value)
        loss      = 0.5 * mean(max((v - R)^2, (v_clipped - R)^2))

    Args:
        values: ``[...]`` current value predictions (carry the gradient).
        old_values: ``[...]`` predictions recorded when the samples were collected.
        targets: ``[...]`` value targets ``R`` (treated as constants).
        clip_value: clip range; ``<= 0`` or ``None`` disables clipping (plain ``0.5 * (v - R)^2``).
        valids: optional mask, same shape.

    Returns:
        Scalar loss.
    """
    targets = targets.detach()
    unclipped = (values - targets) ** 2
    if clip_value is None or clip_value <= 0:
        return 0.5 * masked_mean(unclipped, valids)
    old_values = old_values.detach()
    values_clipped = old_values + torch.clamp(values - old_values, -clip_value, clip_value)
    clipped = (values_clipped - targets) ** 2
    return 0.5 * masked_mean(torch.max(unclipped, clipped), valids)


def entropy_loss(entropy: torch.Tensor, valids: torch.Tensor | None = None) -> torch.Tensor:
    """``-mean(entropy)``: minimising it raises the policy's entropy (exploration bonus)."""
    return -masked_mean(entropy, valids)


def symmetric_kl_loss(sym_kl: torch.Tensor, valids: torch.Tensor | None = None, max_value: float = 30.0) -> torch.Tensor:
    """``min(mean(0.5 * (KL(pi || u) + KL(u || pi))), max_value)``: penalises moving away from the uniform
    policy ``u`` in both directions. Unlike the entropy bonus it grows without bound as one action's
    probability goes to 0 (the ``KL(u || pi)`` half), so it keeps every action alive; the cap keeps a
    collapsed policy's gradient finite. ``sym_kl`` is per sample (``ActionDistribution.symmetric_kl_with_uniform``).
    """
    return torch.clamp(masked_mean(sym_kl, valids), max=max_value)


def kl_loss(kl: torch.Tensor, valids: torch.Tensor | None = None) -> torch.Tensor:
    """``mean(kl)``: penalises moving away from the behaviour policy."""
    return masked_mean(kl, valids)


def ppo_policy_no_gradient(ratio: torch.Tensor, advantages: torch.Tensor, clip_ratio: float) -> torch.Tensor:
    """Bool ``[...]``: the samples whose term in :func:`ppo_policy_loss` has no gradient, because the minimum picks
    the clipped ratio, a constant there: ``A > 0`` and ``ratio > 1 + eps``, or ``A < 0`` and ``ratio < 1 - eps``
    (``A = 0`` carries no gradient either way and is not counted). A diagnostic: how much of a batch (e.g. its
    replayed, many-versions-old samples) the clip leaves untrained."""
    ratio, advantages = ratio.detach(), advantages.detach()
    return ((advantages > 0) & (ratio > 1.0 + clip_ratio)) | ((advantages < 0) & (ratio < 1.0 - clip_ratio))


def ppo_value_no_gradient(values: torch.Tensor, old_values: torch.Tensor, targets: torch.Tensor,
                          clip_value: float | None) -> torch.Tensor:
    """Bool ``[...]``: the samples whose term in :func:`ppo_value_loss` has no gradient: the value moved more than
    ``clip_value`` from the old one and the maximum picks the clipped (constant) error, strictly larger. All False
    without clipping (``clip_value`` None or <= 0)."""
    values, old_values, targets = values.detach(), old_values.detach(), targets.detach()
    if clip_value is None or clip_value <= 0:
        return torch.zeros_like(values, dtype=torch.bool)
    outside = (values - old_values).abs() > clip_value
    clipped = old_values + torch.clamp(values - old_values, -clip_value, clip_value)
    return outside & ((clipped - targets) ** 2 > (values - targets) ** 2)
