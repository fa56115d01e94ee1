"""APPO's learning step as pure functions: value targets and advantages, then the named loss terms.

APPO (Petrenko et al. 2020, "Sample Factory") trains the clipped PPO objective (Schulman et al.
2017, "Proximal Policy Optimization Algorithms", eq. 7) on trajectories that may lag the learner's
weights by a few versions, with V-trace targets (Espeholt et al. 2018, "IMPALA", section 4) to
correct for the lag, or GAE (Schulman et al. 2016) without. For a minibatch of ``B`` trajectories
of ``T`` steps (batch-major ``[B, T]``, as the learner stores them):

    g_t        = gamma at the agent's active steps, 1 at its inactive ones (waiting is not a time step)
    r_t        = clip(reward_scale * reward_t, -reward_clip, reward_clip)
                 + g_t * truncated_t * V(final obs of t)        (a time limit is not the task's end)
    discount_t = g_t * (1 - done_t)                              (done = terminated or truncated)
    returns, A = vtrace(log pi - log mu, discount, r, V, V(x_T), lambda, active)
                 or  gae(r, V, V(x_T), discount, lambda, active)   (inactive steps transparent)
                 or  nstep_returns(r, V, V(x_T), discount, n, active) or monte_carlo_returns(...)
                 (``APPOParams.estimator``; ``sfx.algo.returns``)
    A          = (A - mean_valid(A)) / (std_valid(A) + 1e-8)

    policy      = -mean_valid(min(rho A, clip(rho, 1 - eps, 1 + eps) A)),  rho = pi(a|x) / mu(a|x)
                  (``policy_loss="ppo"``; or ``sfx.algo.policy_losses``: vanilla PG, AWR, V-MPO)
    value       = 0.5 mean_valid(max((v - R)^2, (v_clip - R)^2))   (head scale: v, R normalized)
    exploration = -mean_valid(entropy(pi))  or  min(mean_valid(symmetric KL(pi, uniform)), 30)
    kl          = mean_valid(KL(mu || pi))

and the learner minimises ``sum(coefficient * term)`` with ``APPOParams.coefficients``. Every
function here takes tensors and plain numbers (plus the current and behaviour action
distributions); the hyperparameters travel in one frozen ``APPOParams``, built from a cfg by
``APPOParams.from_cfg``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, NamedTuple

import torch

from sfx.algo.distributions import ActionDistribution, DiagGaussian
from sfx.algo.gae import gae
from sfx.algo.policy_losses import (POLICY_LOSSES, VMPO_KL_BOUNDS, awr_loss, gaussian_kl_parts, vmpo_decoupled_duals,
                                    vmpo_decoupled_loss, vmpo_duals, vmpo_loss, vpg_loss)
from sfx.algo.ppo import entropy_loss, kl_loss, masked_mean, ppo_policy_loss, ppo_value_loss, symmetric_kl_loss
from sfx.algo.returns import monte_carlo_returns, nstep_returns
from sfx.algo.targets import Targets, scale_rewards
from sfx.algo.vtrace import vtrace

__all__ = ["ADVANTAGE_ESTIMATORS", "APPOParams", "EXPLORATION_LOSSES", "POLICY_LOSSES", "REPLAYED_LOSSES", "LOSS_TERMS", "LossTerms", "TrajectoryOutputs", "appo_loss_terms",
           "appo_targets", "normalize_advantages"]

EXPLORATION_LOSSES = ("entropy", "symmetric_kl")
# auto: V-trace with with_vtrace, else GAE (what with_vtrace alone chose before the estimators were a choice)
ADVANTAGE_ESTIMATORS = ("auto", "gae", "vtrace", "nstep", "mc")
REPLAYED_LOSSES = ("ppo", "impala")
LOSS_TERMS = ("policy", "value", "exploration", "kl")  # the LossTerms fields the learner sums


# a sum over data-parallel ranks (torch.distributed.all_reduce, or the identity with one rank)
Reduce = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class APPOParams:
    """The hyperparameters of one APPO step (the cfg fields of the same names)."""

    gamma: float
    reward_scale: float
    reward_clip: float
    with_vtrace: bool
    vtrace_rho: float
    vtrace_c: float
    gae_lambda: float
    ppo_clip_ratio: float
    ppo_clip_value: float
    exploration_loss: str
    value_loss_coeff: float
    exploration_loss_coeff: float
    kl_loss_coeff: float
    vtrace_lambda: float = 1.0
    advantage_estimator: str = "auto"
    n_step: int = 5
    policy_loss: str = "ppo"
    awr_beta: float = 1.0
    awr_max_weight: float = 20.0
    vmpo_eps_eta: float = 0.01
    vmpo_eps_alpha: float = 0.005
    vmpo_kl_bounds: str = "single"
    vmpo_eps_alpha_mu: float = 0.005
    vmpo_eps_alpha_sigma: float = 5e-5
    replayed_loss: str = "ppo"

    def __post_init__(self) -> None:
        for name, allowed in (("exploration_loss", EXPLORATION_LOSSES), ("advantage_estimator", ADVANTAGE_ESTIMATORS),
                              ("policy_loss", POLICY_LOSSES), ("replayed_loss", REPLAYED_LOSSES),
                              ("vmpo_kl_bounds", VMPO_KL_BOUNDS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r} is not known; allowed: {', '.join(allowed)}")

    @property
    def estimator(self) -> str:
        """The advantage estimator in effect: ``advantage_estimator``, or with ``auto`` V-trace if ``with_vtrace``
        else GAE."""
        if self.advantage_estimator == "auto":
            return "vtrace" if self.with_vtrace else "gae"
        return self.advantage_estimator

    @classmethod
    def from_cfg(cls, cfg: Any) -> "APPOParams":
        """The current values of ``cfg`` (read at every step: population-based training changes them)."""
        return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls)})

    @property
    def coefficients(self) -> dict[str, float]:
        """``{term name: coefficient}`` for every name in ``LOSS_TERMS``, in that order."""
        return {"policy": 1.0, "value": self.value_loss_coeff, "exploration": self.exploration_loss_coeff,
                "kl": self.kl_loss_coeff}


class TrajectoryOutputs(NamedTuple):
    """The current weights' view of a learner minibatch (``ActorCritic.forward_trajectories``).

    Attributes:
        action_params: ``[B, T, P]`` action distribution inputs (carry the gradient).
        values: ``[B, T]`` values in the reward scale (carry the gradient).
        values_normalized: ``[B, T]`` the value head's output (carries the gradient).
        bootstrap_values: ``[B]`` ``V(x_T)`` in the reward scale, after the last step (no gradient).
        encoder_features, core_outputs: the (actor's) encoder output ``[B * T, F]`` and core output
            ``[B, T, H]`` with gradient, when the model has auxiliary heads; else None.
    """

    action_params: torch.Tensor
    values: torch.Tensor
    values_normalized: torch.Tensor
    bootstrap_values: torch.Tensor
    encoder_features: torch.Tensor | None = None  # [B * T, F] (the actor's), for auxiliary losses, when asked
    core_outputs: torch.Tensor | None = None      # [B, T, H] (the actor's), for auxiliary losses, when asked


class LossTerms(NamedTuple):
    """Scalar tensors. The fields named in ``LOSS_TERMS`` are the loss terms (they carry the
    gradient); the rest are detached diagnostics.

    Attributes:
        policy: the policy loss (``APPOParams.policy_loss``): PPO's clipped surrogate, vanilla PG, AWR, or
            V-MPO's ``L_pi + L_eta + L_alpha`` (its dual terms train the temperature and the KL multiplier).
        value: the (clipped) value loss in the value head's scale.
        exploration: ``-entropy`` or the capped symmetric KL from uniform (``APPOParams.exploration_loss``).
        kl: mean ``KL(behaviour || current)`` over valid samples.
        entropy: mean entropy of the current policy over valid samples.
        ratio_mean: mean importance ratio ``pi / mu`` over valid samples.
        adv_std: std of the advantages the policy loss used, over all samples.
        value_mean: mean of the current values (reward scale), over all samples.
        target_mean: mean of the value targets (reward scale), over all samples.
        policy_stats: named detached scalars of the policy loss (V-MPO: ``vmpo/eta``, ``vmpo/alpha``,
            ``vmpo/weights_kl``, ``loss/vmpo_policy``, ``loss/vmpo_temperature``, ``loss/vmpo_trust_region``;
            with decoupled bounds ``vmpo/alpha_mu``, ``vmpo/alpha_sigma``, ``vmpo/kl_mu``, ``vmpo/kl_sigma`` in
            place of ``vmpo/alpha``; AWR: ``awr/weight_mean``, ``awr/clipped_fraction``); None with PPO and vanilla PG.
    """

    policy: torch.Tensor
    value: torch.Tensor
    exploration: torch.Tensor
    kl: torch.Tensor
    entropy: torch.Tensor
    ratio_mean: torch.Tensor
    adv_std: torch.Tensor
    value_mean: torch.Tensor
    target_mean: torch.Tensor
    policy_stats: dict[str, torch.Tensor] | None = None  # the policy loss's own detached statistics (V-MPO)


def normalize_advantages(advantages: torch.Tensor, valids: torch.Tensor, reduce: Reduce | None = None,
                         std: torch.Tensor | float | None = None) -> torch.Tensor:
    """``(A - mean) / (std + 1e-8)`` with mean and (unbiased) std over the valid entries only;
    unchanged when fewer than two entries are valid. Any shape, ``valids`` bool of the same shape.

    ``reduce`` (data-parallel ranks): sums a tensor over every rank's minibatch; the mean and std are
    then those of all ranks' valid entries together (from float64 count, sum and sum of squares).
    ``std``: divide by this scale instead of the minibatch's own std (the mean is still the minibatch's),
    e.g. a running std of the advantages over all minibatches so far (``--advantage_normalization``)."""
    adv_valid = advantages[valids]
    if reduce is None:
        if adv_valid.numel() > 1:
            scale = adv_valid.std() if std is None else torch.as_tensor(std, dtype=advantages.dtype)
            return (advantages - adv_valid.mean()) / (scale + 1e-8)
        return advantages
    a = adv_valid.to(torch.float64)
    n, total, squares = reduce(torch.stack([a.new_tensor(float(a.numel())), a.sum(), (a * a).sum()])).unbind()
    if n <= 1:
        return advantages
    mean = total / n
    if std is None:
        std = ((squares - n * mean * mean).clamp(min=0.0) / (n - 1)).sqrt()
    std = torch.as_tensor(std, dtype=torch.float64)
    return (advantages - mean.to(advantages.dtype)) / (std.to(advantages.dtype) + 1e-8)


def appo_targets(rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor,
                 truncation_values: torch.Tensor, values: torch.Tensor, bootstrap_values: torch.Tensor,
                 log_rhos: torch.Tensor | None, valids: torch.Tensor, params: APPOParams,
                 reduce: Reduce | None = None, advantage_scale: torch.Tensor | None = None,
                 active: torch.Tensor | None = None, normalize: bool = True) -> Targets:
    """Value targets and normalized advantages of a minibatch (module docstring, first block).

    Args:
        rewards: ``[B, T]`` raw env rewards.
        terminated: ``[B, T]`` bool, the episode ended at that step: no bootstrap.
        truncated: ``[B, T]`` bool, a time limit cut the episode: bootstrap from ``truncation_values``.
        truncation_values: ``[B, T]`` ``V(final obs)`` of truncated steps (reward scale).
        values: ``[B, T]`` ``V(x_t)`` of the current weights (reward scale).
        bootstrap_values: ``[B]`` ``V(x_T)`` after the last step.
        log_rhos: ``[B, T]`` ``log pi(a_t|x_t) - log mu(a_t|x_t)``; needed with V-trace, unused by the others.
        valids: ``[B, T]`` bool, the samples that count (advantage statistics are over these).
        params: ``gamma, reward_scale, reward_clip``, the estimator (``APPOParams.estimator``) and its parameters
            (``vtrace_rho, vtrace_c, vtrace_lambda``; ``gae_lambda``; ``n_step``).
        reduce: with data-parallel ranks, a sum over ranks (advantages are normalized over all of them).
        advantage_scale: ``[B, T]`` or ``[B]`` factors applied to the advantages before they are normalized
            (PopArt: ``1 / sigma`` of each sample's task, so every task's policy gradient has the same scale).
        active: ``[B, T]`` bool, False at the agent's inactive steps (waiting for its turn, sitting out):
            transparent in the recursions (``sfx.algo.targets``): they do not discount, their rewards reach
            the active step before them, their values and ratios reach no active step's target (their own
            targets are the carried ones, their advantages 0). ``None``: every step is active. Unlike
            ``valids`` it does not depend on the policy lag: a lagging active step is still a step of the agent.
        normalize: False returns the advantages as they are (after ``advantage_scale``), for a caller that
            normalizes them with statistics of its own (:func:`normalize_advantages` with ``std``).

    Returns:
        ``Targets(returns, advantages)``, both ``[B, T]``, no gradient; ``advantages`` normalized (with ``normalize``).
    """
    p = params
    with torch.no_grad():
        r = scale_rewards(rewards, p.reward_scale, p.reward_clip)
        if active is None:
            gamma: float | torch.Tensor = p.gamma
        else:
            active = active.to(device=r.device, dtype=torch.bool)
            gamma = torch.where(active, torch.full_like(r, p.gamma), torch.ones_like(r))
        r = r + gamma * truncated.to(r.dtype) * truncation_values
        discounts = gamma * (1.0 - (terminated | truncated).to(r.dtype))
        def tm(x: torch.Tensor) -> torch.Tensor:  # the recursions run over time-major [T, B]
            return x.transpose(0, 1)

        active_tm = None if active is None else tm(active)
        estimator = p.estimator
        if estimator == "vtrace":
            if log_rhos is None:
                raise ValueError("appo_targets: log_rhos is None; V-trace (with_vtrace=True) needs the log ratios")
            out = vtrace(tm(log_rhos), tm(discounts), tm(r), tm(values), bootstrap_values,
                         clip_rho_threshold=p.vtrace_rho, clip_pg_rho_threshold=p.vtrace_rho, lambda_=p.vtrace_lambda,
                         clip_c_threshold=p.vtrace_c, active=active_tm)
        elif estimator == "gae":
            out = gae(tm(r), tm(values), bootstrap_values, tm(discounts), p.gae_lambda, active=active_tm)
        elif estimator == "nstep":
            out = nstep_returns(tm(r), tm(values), bootstrap_values, tm(discounts), p.n_step, active=active_tm)
        else:
            out = monte_carlo_returns(tm(r), tm(values), bootstrap_values, tm(discounts), active=active_tm)
        advantages = tm(out.advantages)
        if advantage_scale is not None:
            scale = advantage_scale.to(advantages.dtype)
            advantages = advantages * (scale if scale.dim() == 2 else scale.unsqueeze(1))
        if not normalize:
            return Targets(returns=tm(out.returns), advantages=advantages)
        return Targets(returns=tm(out.returns), advantages=normalize_advantages(advantages, valids, reduce))


def appo_loss_terms(dist: ActionDistribution, old_dist: ActionDistribution, log_prob: torch.Tensor,
                    old_log_prob: torch.Tensor, targets: Targets, returns_normalized: torch.Tensor,
                    values: torch.Tensor, values_normalized: torch.Tensor, old_values_normalized: torch.Tensor,
                    valids: torch.Tensor, params: APPOParams, vmpo_raw_duals: torch.Tensor | None = None,
                    replayed: torch.Tensor | None = None) -> LossTerms:
    """The loss terms of a minibatch (module docstring, second block), masked to ``valids``.

    Args:
        dist: the current policy over the ``B * T`` samples (rows in ``[B, T]`` order).
        old_dist: the behaviour policy over the same rows.
        log_prob: ``[B, T]`` ``log pi(a_t|x_t)`` of the taken actions (carries the gradient).
        old_log_prob: ``[B, T]`` ``log mu(a_t|x_t)`` recorded when acting.
        targets: ``appo_targets``'s result (``[B, T]``; ``returns`` in the reward scale).
        returns_normalized: ``[B, T]`` ``targets.returns`` in the value head's scale.
        values: ``[B, T]`` current values in the reward scale (for ``value_mean`` only).
        values_normalized: ``[B, T]`` the value head's output (carries the gradient).
        old_values_normalized: ``[B, T]`` the values recorded when acting, in the head's scale.
        valids: ``[B, T]`` bool. params: the clips, ``exploration_loss``, ``policy_loss`` and its parameters.
        vmpo_raw_duals: ``[2]`` V-MPO's learned parameters (``sfx.algo.policy_losses.vmpo_duals``; ``[3]``,
            ``vmpo_decoupled_duals``, with ``vmpo_kl_bounds="decoupled"``); needed with ``policy_loss="vmpo"``,
            unused otherwise.
        replayed: ``[B, T]`` bool, the samples from a replay buffer (None: none). With ``replayed_loss="impala"``
            they get IMPALA's loss, as the V-trace replay platform trains them: ``-A log pi`` (V-trace's advantages
            carry the clipped ratio) and the unclipped value loss; each term is then the valid samples' mean of
            the fresh samples' PPO terms and the replayed ones'.

    Returns:
        ``LossTerms``.
    """
    shape = valids.shape
    kl_per_sample = None  # V-MPO computes it first; else after the other terms (the gradients' summation order)
    ratio = torch.exp(log_prob.detach() - old_log_prob.detach())
    policy_stats = None
    adv = targets.advantages
    impala_rows = None
    if params.replayed_loss == "impala" and replayed is not None and bool((replayed & valids).any()):
        impala_rows = replayed & valids
    if params.policy_loss == "ppo" and impala_rows is not None:
        fresh_rows = valids & ~replayed
        share = impala_rows.sum().to(adv.dtype) / valids.sum().to(adv.dtype)
        clipped, ratio = ppo_policy_loss(log_prob, old_log_prob, adv, params.ppo_clip_ratio, fresh_rows)
        policy = (1.0 - share) * clipped + share * vpg_loss(log_prob, adv, impala_rows)
    elif params.policy_loss == "ppo":
        policy, ratio = ppo_policy_loss(log_prob, old_log_prob, adv, params.ppo_clip_ratio, valids)
    elif params.policy_loss == "vpg":
        policy = vpg_loss(log_prob, adv, valids)
    elif params.policy_loss == "awr":
        awr = awr_loss(log_prob, adv, params.awr_beta, params.awr_max_weight, valids)
        policy = awr.loss
        clipped = (awr.weights >= params.awr_max_weight).to(adv.dtype)
        policy_stats = {"awr/weight_mean": masked_mean(awr.weights, valids),
                        "awr/clipped_fraction": masked_mean(clipped, valids)}
    else:
        policy, policy_stats, kl_per_sample = _vmpo_policy_term(dist, old_dist, log_prob, adv, valids, params,
                                                                vmpo_raw_duals)
    if impala_rows is None:
        value = ppo_value_loss(values_normalized, old_values_normalized, returns_normalized, params.ppo_clip_value,
                               valids)
    else:
        share = impala_rows.sum().to(values_normalized.dtype) / valids.sum().to(values_normalized.dtype)
        value = (1.0 - share) * ppo_value_loss(values_normalized, old_values_normalized, returns_normalized,
                                               params.ppo_clip_value, valids & ~replayed) \
            + share * ppo_value_loss(values_normalized, old_values_normalized, returns_normalized, None, impala_rows)
    entropy = dist.entropy().reshape(shape)
    if params.exploration_loss == "symmetric_kl":
        exploration = symmetric_kl_loss(dist.symmetric_kl_with_uniform().reshape(shape), valids)
    else:
        exploration = entropy_loss(entropy, valids)
    if kl_per_sample is None:
        kl_per_sample = old_dist.kl_divergence(dist).reshape(shape)
    kl = kl_loss(kl_per_sample, valids)
    return LossTerms(
        policy=policy, value=value, exploration=exploration, kl=kl,
        entropy=masked_mean(entropy.detach(), valids),
        ratio_mean=masked_mean(ratio.detach(), valids),
        adv_std=adv.std() if adv.numel() > 1 else torch.zeros((), dtype=adv.dtype, device=adv.device),
        value_mean=values.detach().mean(),
        target_mean=targets.returns.mean(),
        policy_stats=policy_stats,
    )


def _vmpo_policy_term(dist: ActionDistribution, old_dist: ActionDistribution, log_prob: torch.Tensor,
                      adv: torch.Tensor, valids: torch.Tensor, params: APPOParams,
                      vmpo_raw_duals: torch.Tensor | None) -> tuple[torch.Tensor, dict, torch.Tensor | None]:
    """V-MPO's policy term (``policy_loss="vmpo"``), its statistics, and the per-sample KL when it computed it
    (single bounds; None with decoupled ones): see :func:`appo_loss_terms`."""
    if vmpo_raw_duals is None:
        raise ValueError("appo_loss_terms: policy_loss='vmpo' needs vmpo_raw_duals (the learned eta and alpha)")
    shape = valids.shape
    kl_per_sample = None
    if params.vmpo_kl_bounds == "decoupled":
        # Song et al. 2019's appendix: the mean's and the covariance's parts of the KL, bounded apart
        if not (isinstance(dist, DiagGaussian) and isinstance(old_dist, DiagGaussian)):
            raise ValueError(f"appo_loss_terms: vmpo_kl_bounds='decoupled' needs Gaussian policies, not "
                             f"{type(dist).__name__}")
        eta, alpha_mu, alpha_sigma = vmpo_decoupled_duals(vmpo_raw_duals)
        parts = gaussian_kl_parts(old_dist.mean, old_dist.log_std, dist.mean, dist.log_std)
        vm = vmpo_decoupled_loss(log_prob, adv, parts.mean.reshape(shape), parts.std.reshape(shape), eta,
                                 alpha_mu, alpha_sigma, params.vmpo_eps_eta, params.vmpo_eps_alpha_mu,
                                 params.vmpo_eps_alpha_sigma, valids)
        policy_stats = {"vmpo/alpha_mu": alpha_mu.detach(), "vmpo/alpha_sigma": alpha_sigma.detach(),
                        "vmpo/kl_mu": vm.kl_mu, "vmpo/kl_sigma": vm.kl_sigma}
    else:
        eta, alpha = vmpo_duals(vmpo_raw_duals)
        kl_per_sample = old_dist.kl_divergence(dist).reshape(shape)
        vm = vmpo_loss(log_prob, adv, kl_per_sample, eta, alpha, params.vmpo_eps_eta, params.vmpo_eps_alpha,
                       valids)
        policy_stats = {"vmpo/alpha": alpha.detach()}
    policy = vm.total
    policy_stats = {"vmpo/eta": eta.detach(), **policy_stats, "vmpo/weights_kl": vm.weights_kl,
                    "loss/vmpo_policy": vm.policy.detach(), "loss/vmpo_temperature": vm.temperature.detach(),
                    "loss/vmpo_trust_region": vm.trust_region.detach()}
    return policy, policy_stats, kl_per_sample
