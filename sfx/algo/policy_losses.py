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

Decoupled KL bounds for Gaussian policies (Song et al. 2019, appendix "Decoupled KL constraints for continuous
control", after Abdolmaleki et al. 2018's MPO): one bound on the whole KL lets a step spend its budget on the
covariance, and a policy that shrinks its noise early stops exploring. The KL of pi_old = N(mu_o, S_o) to
pi = N(mu, S) is split into the part that moves the mean with the covariance held at pi_old's, and the part that
moves the covariance with the mean held at pi_old's (d action dimensions):

    C_mu    = KL(N(mu_o, S_o) || N(mu, S_o)) = 1/2 (mu - mu_o)^T S_o^-1 (mu - mu_o)
    C_Sigma = KL(N(mu_o, S_o) || N(mu_o, S)) = 1/2 (tr(S^-1 S_o) - d + log(det S / det S_o))

each with its own bound and Lagrange multiplier, in place of L_alpha:

    L_alpha = mean_D(alpha_mu (eps_alpha_mu - sg[C_mu]) + sg[alpha_mu] C_mu)
            + mean_D(alpha_Sigma (eps_alpha_Sigma - sg[C_Sigma]) + sg[alpha_Sigma] C_Sigma)

For the diagonal Gaussians of sfx (``S = diag(sigma^2)``) the sums run over the action dimensions
(:func:`gaussian_kl_parts`); :func:`vmpo_decoupled_loss` is :func:`vmpo_loss` with that L_alpha. When only the
mean moves, C_mu is the whole KL and C_Sigma is 0; when only sigma moves, the reverse.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from sfx.algo.ppo import masked_mean

__all__ = ["AWRLoss", "GaussianKLParts", "POLICY_LOSSES", "VMPODecoupledLoss", "VMPOLoss", "VMPO_KL_BOUNDS", "awr_loss",
           "gaussian_kl_parts", "top_half_mask", "vmpo_decoupled_duals", "vmpo_decoupled_loss", "vmpo_dual_init",
           "vmpo_duals", "vmpo_loss", "vpg_loss"]

POLICY_LOSSES = ("ppo", "vpg", "awr", "vmpo")
# single: one bound on KL(pi_old || pi), any action space; decoupled: the mean's and the covariance's, Gaussians only
VMPO_KL_BOUNDS = ("single", "decoupled")
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


def vmpo_dual_init(eta: float, alpha: float, alpha_sigma: float | None = None) -> torch.Tensor:
    """``[2]`` unconstrained parameters whose :func:`vmpo_duals` are ``(eta, alpha)`` (each > 1e-8); with
    ``alpha_sigma``, ``[3]`` whose :func:`vmpo_decoupled_duals` are ``(eta, alpha_mu=alpha, alpha_sigma)``."""
    def inverse_softplus(y: float) -> float:
        y = y - _MIN_DUAL
        return y + math.log(-math.expm1(-y))  # log(exp(y) - 1), stable for large y

    values = [eta, alpha] if alpha_sigma is None else [eta, alpha, alpha_sigma]
    return torch.tensor([inverse_softplus(v) for v in values], dtype=torch.float32)


def vmpo_duals(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(eta, alpha)``: ``softplus(raw) + 1e-8`` of the ``[2]`` learned parameters (scalars, with gradient)."""
    if raw.shape != (2,):
        raise ValueError(f"vmpo_duals: raw has shape {tuple(raw.shape)}; (eta, alpha) are [2] "
                         f"(decoupled bounds' [3]: vmpo_decoupled_duals)")
    positive = F.softplus(raw) + _MIN_DUAL
    return positive[0], positive[1]


def vmpo_decoupled_duals(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(eta, alpha_mu, alpha_sigma)``: ``softplus(raw) + 1e-8`` of the ``[3]`` learned parameters of the
    decoupled bounds (scalars, with gradient)."""
    if raw.shape != (3,):
        raise ValueError(f"vmpo_decoupled_duals: raw has shape {tuple(raw.shape)}; (eta, alpha_mu, alpha_sigma) "
                         f"are [3] (a single bound's [2]: vmpo_duals)")
    positive = F.softplus(raw) + _MIN_DUAL
    return positive[0], positive[1], positive[2]


class GaussianKLParts(NamedTuple):
    """``[...]`` per-sample parts of ``KL(pi_old || pi)`` between diagonal Gaussians (module docstring):
    ``mean`` = C_mu (pi's covariance held at pi_old's), ``std`` = C_Sigma (pi's mean held at pi_old's)."""

    mean: torch.Tensor
    std: torch.Tensor


def gaussian_kl_parts(old_mean: torch.Tensor, old_log_std: torch.Tensor, mean: torch.Tensor,
                      log_std: torch.Tensor) -> GaussianKLParts:
    """The decoupled KL of V-MPO's appendix for diagonal Gaussians, summed over the last (action) dimension.

    Args:
        old_mean, old_log_std: ``[..., d]`` pi_old's mean and log standard deviation (constants: detached).
        mean, log_std: ``[..., d]`` pi's (carry the gradient).

    Returns:
        ``GaussianKLParts`` of ``[...]`` tensors:
        ``C_mu = 1/2 sum_i (mu_i - mu_o,i)^2 / sigma_o,i^2`` and
        ``C_Sigma = 1/2 sum_i (sigma_o,i^2 / sigma_i^2 - 1 + 2 (log sigma_i - log sigma_o,i))``.
    """
    old_mean, old_log_std = old_mean.detach(), old_log_std.detach()
    c_mu = 0.5 * (((mean - old_mean) * torch.exp(-old_log_std)) ** 2).sum(-1)
    log_ratio = log_std - old_log_std  # log sigma / sigma_o
    c_sigma = 0.5 * (torch.exp(-2.0 * log_ratio) - 1.0 + 2.0 * log_ratio).sum(-1)
    return GaussianKLParts(mean=c_mu, std=c_sigma)


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
    policy, temperature, weights_kl = _vmpo_weighted_terms(log_prob, adv, top, k, eta, eps_eta)
    mean_kl = masked_mean(kl, valids)
    trust_region = _lagrangian(alpha, eps_alpha, mean_kl)
    return VMPOLoss(total=policy + temperature + trust_region, policy=policy, temperature=temperature,
                    trust_region=trust_region, kl=mean_kl.detach(), weights_kl=weights_kl)


def _vmpo_weighted_terms(log_prob: torch.Tensor, adv: torch.Tensor, top: torch.Tensor, k: int, eta: torch.Tensor,
                         eps_eta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(L_pi, L_eta, KL(psi || uniform))`` over the ``k > 0`` samples of ``top`` (eqs. 3-4)."""
    a = adv[top]
    # softmax over the top half: psi, with eta held constant (sg[eta] in eq. 3)
    psi = torch.softmax(a / eta.detach(), dim=0)
    policy = -(psi * log_prob[top]).sum()
    # log mean exp(A / eta) = logsumexp(A / eta) - log k: eq. 4 without overflow
    temperature = eta * eps_eta + eta * (torch.logsumexp(a / eta, dim=0) - math.log(k))
    weights_kl = (psi * torch.log(psi * k).clamp(min=-1e30)).sum().detach()
    return policy, temperature, weights_kl


def _lagrangian(alpha: torch.Tensor, eps: float, mean_kl: torch.Tensor) -> torch.Tensor:
    """``alpha (eps - sg[KL]) + sg[alpha] KL`` (eq. 5): alpha learns the constraint, the policy feels sg[alpha]."""
    return alpha * (eps - mean_kl.detach()) + alpha.detach() * mean_kl


class VMPODecoupledLoss(NamedTuple):
    """Scalar tensors. ``policy`` (L_pi), ``temperature`` (L_eta), ``trust_region_mu`` and ``trust_region_sigma``
    (the two halves of the decoupled L_alpha) carry the gradient (``total`` is their sum, ``trust_region`` the
    halves' sum); ``kl_mu`` and ``kl_sigma`` (mean C_mu and C_Sigma over valid samples) and ``weights_kl`` are
    detached diagnostics."""

    total: torch.Tensor
    policy: torch.Tensor
    temperature: torch.Tensor
    trust_region: torch.Tensor
    trust_region_mu: torch.Tensor
    trust_region_sigma: torch.Tensor
    kl_mu: torch.Tensor
    kl_sigma: torch.Tensor
    weights_kl: torch.Tensor


def vmpo_decoupled_loss(log_prob: torch.Tensor, advantages: torch.Tensor, kl_mu: torch.Tensor, kl_sigma: torch.Tensor,
                        eta: torch.Tensor, alpha_mu: torch.Tensor, alpha_sigma: torch.Tensor, eps_eta: float,
                        eps_alpha_mu: float, eps_alpha_sigma: float,
                        valids: torch.Tensor | None = None) -> VMPODecoupledLoss:
    """V-MPO's loss with the decoupled KL bounds of Gaussian policies (module docstring): eqs. 3-4 as in
    :func:`vmpo_loss`, and one Lagrangian per part of the KL.

    Args:
        log_prob: ``[...]`` ``log pi(a|s)`` of the taken actions (carries the gradient).
        advantages: ``[...]`` advantages (constants).
        kl_mu, kl_sigma: ``[...]`` C_mu and C_Sigma per sample (:func:`gaussian_kl_parts`; carry the gradient to pi).
        eta, alpha_mu, alpha_sigma: scalar tensors > 0 (:func:`vmpo_decoupled_duals`; carry their own gradient).
        eps_eta, eps_alpha_mu, eps_alpha_sigma: the bounds, > 0.
        valids: optional mask, same shape.
    """
    if not eps_eta > 0 or not eps_alpha_mu > 0 or not eps_alpha_sigma > 0:
        raise ValueError(f"vmpo_decoupled_loss: eps_eta={eps_eta!r}, eps_alpha_mu={eps_alpha_mu!r}, "
                         f"eps_alpha_sigma={eps_alpha_sigma!r}; all must be > 0")
    adv = advantages.detach()
    top = top_half_mask(adv, valids)
    k = int(top.sum())
    zero = log_prob.sum() * 0.0 + eta * 0.0
    if k == 0:
        tr_mu, tr_sigma = zero + alpha_mu * 0.0, zero + alpha_sigma * 0.0
        return VMPODecoupledLoss(zero, zero, zero, tr_mu + tr_sigma, tr_mu, tr_sigma, zero.detach(), zero.detach(),
                                 zero.detach())
    policy, temperature, weights_kl = _vmpo_weighted_terms(log_prob, adv, top, k, eta, eps_eta)
    mean_kl_mu, mean_kl_sigma = masked_mean(kl_mu, valids), masked_mean(kl_sigma, valids)
    tr_mu = _lagrangian(alpha_mu, eps_alpha_mu, mean_kl_mu)
    tr_sigma = _lagrangian(alpha_sigma, eps_alpha_sigma, mean_kl_sigma)
    return VMPODecoupledLoss(total=policy + temperature + (tr_mu + tr_sigma), policy=policy, temperature=temperature,
                             trust_region=tr_mu + tr_sigma, trust_region_mu=tr_mu, trust_region_sigma=tr_sigma,
                             kl_mu=mean_kl_mu.detach(), kl_sigma=mean_kl_sigma.detach(), weights_kl=weights_kl)
