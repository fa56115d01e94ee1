"""The on-policy study's policy losses besides PPO's clipped surrogate (``sfx.algo.ppo``).

Andrychowicz et al. 2021, "What Matters in On-Policy Reinforcement Learning? A Large-Scale Empirical
Study", section 3 ("Policy losses") compares PPO, vanilla policy gradient, AWR and V-MPO on the same
advantages. Every loss here is a masked mean over the valid samples (``sfx.algo.ppo.masked_mean``), takes
the advantages as constants, and gives 0, not NaN, when no sample is valid. Shapes: any ``[...]`` (the
learner passes ``[B, T]``); every per-sample argument has the same shape.

Vanilla policy gradient (Williams 1992, REINFORCE with a baseline; Sutton et al. 2000):

    L = -mean(A * log pi(a|s))

AWR (Peng et al. 2019, "Advantage-Weighted Regression", eq. 14; the weight clip from its section 5):

    w = min(exp(A / beta), w_max),    L = -mean(w * log pi(a|s))

V-MPO (Song et al. 2019, "V-MPO: On-Policy Maximum a Posteriori Policy Optimization for Discrete and
Continuous Control", section 4, eqs. 2-5): with D~ the valid samples whose advantages are in the top half,

    psi(s, a) = exp(A / sg[eta]) / sum_{D~} exp(A / sg[eta])
    L_pi      = -sum_{D~} psi(s, a) log pi(a|s)                                       (eq. 3)
    L_eta     = eta * eps_eta + eta * log((1 / |D~|) sum_{D~} exp(A / eta))           (eq. 4)
    L_alpha   = mean_D(alpha * (eps_alpha - sg[KL(pi_old || pi)]) + sg[alpha] * KL(pi_old || pi))   (eq. 5)

``eta`` (the temperature) and ``alpha`` (the KL constraint's Lagrange multiplier) are learned with the same
optimizer as the network; minimising L_eta and L_alpha in them is the dual descent of the paper: dL_eta/deta =
eps_eta - KL(psi || uniform on D~), so eta grows while the weights are more peaked than eps_eta allows, and
dL_alpha/dalpha = eps_alpha - KL, so alpha grows while the policy moves further from pi_old than eps_alpha.
Both are kept positive by a softplus of an unconstrained parameter (:func:`vmpo_duals`), as the paper
requires of them (it projects them to a small minimum instead).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from sfx.algo.ppo import masked_mean

__all__ = ["AWRLoss", "POLICY_LOSSES", "VMPOLoss", "awr_loss", "top_half_mask", "vmpo_dual_init", "vmpo_duals",
           "vmpo_loss", "vpg_loss"]

POLICY_LOSSES = ("ppo", "vpg", "awr", "vmpo")
_MIN_DUAL = 1e-8  # eta and alpha stay above this (1 / eta must stay finite)


def vpg_loss(log_prob: torch.Tensor, advantages: torch.Tensor, valids: torch.Tensor | None = None) -> torch.Tensor:
    """``-mean(A * log pi)``: the vanilla policy-gradient loss (module docstring). ``log_prob`` carries the
    gradient, ``advantages`` are constants, ``valids`` a mask of the same shape (None: all). Returns a scalar."""
    return -masked_mean(advantages.detach() * log_prob, valids)


class AWRLoss(NamedTuple):
    """``loss`` (scalar, carries the gradient) and the per-sample ``weights`` (``[...]``, no gradient)."""

    loss: torch.Tensor
    weights: torch.Tensor


def awr_loss(log_prob: torch.Tensor, advantages: torch.Tensor, beta: float, max_weight: float,
             valids: torch.Tensor | None = None) -> AWRLoss:
    """Advantage-weighted regression (module docstring): ``-mean(min(exp(A / beta), max_weight) * log pi)``.

    Args:
        log_prob: ``[...]`` ``log pi(a|s)`` (carries the gradient).
        advantages: ``[...]`` advantages (constants).
        beta: the temperature, > 0.
        max_weight: the clip of the weights, > 0.
        valids: optional mask, same shape.
    """
    if not beta > 0 or not max_weight > 0:
        raise ValueError(f"awr_loss: beta={beta!r}, max_weight={max_weight!r}; both must be > 0")
    adv = advantages.detach()
    # exp of the clipped exponent: the same min(exp(A / beta), w_max) without overflowing to inf
    weights = torch.exp(torch.clamp(adv / beta, max=math.log(max_weight)))
    return AWRLoss(loss=-masked_mean(weights * log_prob, valids), weights=weights)


def top_half_mask(advantages: torch.Tensor, valids: torch.Tensor | None = None) -> torch.Tensor:
    """Bool, same shape: the ``ceil(n / 2)`` valid samples with the largest advantages (``n`` valid samples;
    ties broken by position). All False when none is valid."""
    adv = advantages.detach().reshape(-1)
    mask = torch.ones_like(adv, dtype=torch.bool) if valids is None else valids.bool().reshape(-1)
    n = int(mask.sum())
    out = torch.zeros_like(mask)
    if n == 0:
        return out.reshape(advantages.shape)
    ranked = torch.where(mask, adv, torch.full_like(adv, -math.inf))
    out[torch.topk(ranked, (n + 1) // 2, sorted=False).indices] = True
    return out.reshape(advantages.shape)


def vmpo_dual_init(eta: float, alpha: float) -> torch.Tensor:
    """``[2]`` unconstrained parameters whose :func:`vmpo_duals` are ``(eta, alpha)`` (each > 1e-8)."""
    def inverse_softplus(y: float) -> float:
        y = y - _MIN_DUAL
        return y + math.log(-math.expm1(-y))  # log(exp(y) - 1), stable for large y

    return torch.tensor([inverse_softplus(eta), inverse_softplus(alpha)], dtype=torch.float32)


def vmpo_duals(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(eta, alpha)``: ``softplus(raw) + 1e-8`` of the ``[2]`` learned parameters (scalars, with gradient)."""
    positive = F.softplus(raw) + _MIN_DUAL
    return positive[0], positive[1]


class VMPOLoss(NamedTuple):
    """Scalar tensors. ``policy`` (L_pi), ``temperature`` (L_eta), ``trust_region`` (L_alpha) carry the gradient
    (``total`` is their sum); ``kl`` (mean KL(pi_old || pi) over valid samples) and ``weights_kl`` (KL(psi ||
    uniform on D~), what eps_eta bounds) are detached diagnostics."""

    total: torch.Tensor
    policy: torch.Tensor
    temperature: torch.Tensor
    trust_region: torch.Tensor
    kl: torch.Tensor
    weights_kl: torch.Tensor


def vmpo_loss(log_prob: torch.Tensor, advantages: torch.Tensor, kl: torch.Tensor, eta: torch.Tensor,
              alpha: torch.Tensor, eps_eta: float, eps_alpha: float,
              valids: torch.Tensor | None = None) -> VMPOLoss:
    """V-MPO's loss (module docstring, eqs. 3-5).

    Args:
        log_prob: ``[...]`` ``log pi(a|s)`` of the taken actions (carries the gradient).
        advantages: ``[...]`` advantages (constants).
        kl: ``[...]`` ``KL(pi_old(.|s) || pi(.|s))`` per sample (carries the gradient to pi).
        eta, alpha: scalar tensors > 0, the temperature and the KL multiplier (carry their own gradient).
        eps_eta, eps_alpha: the bounds of the weights' KL from uniform and of the policy's KL, > 0.
        valids: optional mask, same shape.
    """
    if not eps_eta > 0 or not eps_alpha > 0:
        raise ValueError(f"vmpo_loss: eps_eta={eps_eta!r}, eps_alpha={eps_alpha!r}; both must be > 0")
    adv = advantages.detach()
    top = top_half_mask(adv, valids)
    k = int(top.sum())
    zero = log_prob.sum() * 0.0 + eta * 0.0
    if k == 0:
        return VMPOLoss(zero, zero, zero, zero + alpha * 0.0, zero.detach(), zero.detach())
    a = adv[top]
    # softmax over the top half: psi, with eta held constant (sg[eta] in eq. 3)
    psi = torch.softmax(a / eta.detach(), dim=0)
    policy = -(psi * log_prob[top]).sum()
    # log mean exp(A / eta) = logsumexp(A / eta) - log k: eq. 4 without overflow
    temperature = eta * eps_eta + eta * (torch.logsumexp(a / eta, dim=0) - math.log(k))
    mean_kl = masked_mean(kl, valids)
    trust_region = alpha * (eps_alpha - mean_kl.detach()) + alpha.detach() * mean_kl
    weights_kl = (psi * torch.log(psi * k).clamp(min=-1e30)).sum().detach()
    return VMPOLoss(total=policy + temperature + trust_region, policy=policy, temperature=temperature,
                    trust_region=trust_region, kl=mean_kl.detach(), weights_kl=weights_kl)
