"""APPO (asynchronous PPO with V-trace; Sample Factory's algorithm): sfx's default agent.

Acting: sample an action from the policy head's distribution and store its log-prob, the distribution's
parameters and the value (and the value of a time-limit step's final observation, to bootstrap from).
Learning: each iteration takes ``--num_batches_per_iteration`` minibatches of ``--batch_size`` samples,
``--ppo_epochs`` passes over them in random order; one minibatch step is :func:`learning_step`: the model
recomputes the trajectories (``ActorCritic.forward_trajectories``), :mod:`sfx.algo.appo` gives the targets
(``--advantage_estimator``: V-trace, GAE, N-step or Monte-Carlo returns) and the named loss terms (``--policy_loss``:
PPO's clipped surrogate, vanilla PG, AWR or V-MPO: the choices of the on-policy study, Andrychowicz et al. 2021), and the step sums ``coefficient * term``, clips the gradient,
steps Adam and returns its statistics. It runs without any process or queue (tests,
``bench/learner_step.py``).
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Iterator, Mapping

import torch

from sfx.agents.base import Acted, ActingRule, Agent, Batch, FieldSpec, NonFiniteBatch, tree_map
from sfx.agents.kit import fused_adam, gradient_step
from sfx.algo.appo import (ADVANTAGE_ESTIMATORS, LOSS_TERMS, POLICY_LOSSES, REPLAYED_LOSSES, APPOParams, appo_loss_terms, appo_targets,
                            normalize_advantages)
from sfx.algo.clear import clear_cloning_terms
from sfx.algo.minibatches import gather_transitions, trajectory_minibatches, transition_minibatches
from sfx.algo.distributions import DiagGaussian, action_params_size, categorical_sizes, make_action_distribution
from sfx.algo.normalizers import RunningMeanStd
from sfx.algo.policy_losses import VMPO_KL_BOUNDS, vmpo_dual_init
from sfx.algo.schedules import KL_ADAPTIVE_SCHEDULES, LR_SCHEDULES, kl_adaptive_lr
from sfx.algo.targets import Targets
from sfx.algo.ppo import ppo_policy_no_gradient, ppo_value_no_gradient
from sfx.cfg.flag_types import add_bool_arg
from sfx.errors import ConfigError

__all__ = ["APPO", "APPOActingRule", "MINIBATCH_UNITS", "advantage_estimator", "iteration_targets", "learning_step",
           "make_optimizer", "minibatch_unit", "running_advantage_normalization", "trajectories_per_minibatch"]

MINIBATCH_UNITS = ("auto", "trajectories", "transitions")
# a minibatch step on precomputed targets (--minibatch_unit=transitions): iteration_targets' result, per sample
TARGET_FIELDS = ("target_returns", "target_advantages")


def advantage_estimator(cfg: Any) -> str:
    """The estimator in effect: ``--advantage_estimator``, or with ``auto`` V-trace if ``--with_vtrace`` else GAE."""
    return APPOParams.from_cfg(cfg).estimator


def trajectories_per_minibatch(cfg: Any) -> int:
    return cfg.batch_size // cfg.rollout


def minibatch_unit(cfg: Any) -> str:
    """``--minibatch_unit`` in effect: ``trajectories`` or ``transitions`` (``auto``: trajectories)."""
    return "trajectories" if cfg.minibatch_unit == "auto" else cfg.minibatch_unit


def make_optimizer(cfg: Any, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The learner's optimizer: Adam with ``--learning_rate``, ``--adam_beta1/2``, ``--adam_eps``; PyTorch's fused
    kernel where every parameter is on CUDA (the kit's ``fused_adam``: one launch per step for all tensors), the
    plain one on the CPU (its numerics unchanged)."""
    return fused_adam(model.parameters(), lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                      eps=cfg.adam_eps)


def running_advantage_normalization(cfg: Any) -> bool:
    """Whether ``--advantage_normalization`` resolves to ``running`` (``auto``: yes, except with ``--popart``)."""
    mode = cfg.advantage_normalization
    return mode == "running" or (mode == "auto" and not cfg.popart)


def popart_summary(popart: Any, returns: torch.Tensor, tasks: torch.Tensor, valids: torch.Tensor) -> dict[str, float]:
    """``popart/mu_<k>``, ``popart/sigma_<k>`` (every task's statistics after the update) and
    ``popart/target_std_<k>`` (the spread of task ``k``'s valid value targets in this minibatch, what
    ``sigma_k`` should track; only for the tasks with two valid targets or more in it)."""
    out: dict[str, float] = {}
    ids = tasks.reshape(-1, 1).expand_as(returns)
    for k in range(popart.num_tasks):
        out[f"popart/mu_{k}"] = float(popart.mu[k])
        out[f"popart/sigma_{k}"] = float(popart.sigma_[k])
        own = returns[(ids == k) & valids]
        if own.numel() > 1:
            out[f"popart/target_std_{k}"] = float(own.double().std())
    return out


def replay_clip_summary(log_prob: torch.Tensor, mb: dict[str, Any], advantages: torch.Tensor,
                        values_normalized: torch.Tensor, old_values_normalized: torch.Tensor,
                        returns_normalized: torch.Tensor, valids: torch.Tensor, params: APPOParams) -> dict[str, float]:
    """With replay: the fractions of the valid fresh and replayed samples whose policy term gets no gradient from
    PPO's ratio clip (``clip/policy_fresh``, ``clip/policy_replayed``; with ``--policy_loss=ppo``) and whose value
    term gets none from the value clip around the stored value (``clip/value_fresh``, ``clip/value_replayed``).
    Replayed samples were acted many versions ago: their ratios and stored values are far from the current ones."""
    replayed = mb["replayed"].reshape(-1, 1).expand_as(valids) if mb["replayed"].dim() == 1 else mb["replayed"]
    masks = {"value": ppo_value_no_gradient(values_normalized, old_values_normalized, returns_normalized,
                                            params.ppo_clip_value)}
    if params.policy_loss == "ppo":
        ratio = torch.exp(log_prob.detach() - mb["log_probs"])
        masks["policy"] = ppo_policy_no_gradient(ratio, advantages, params.ppo_clip_ratio)
    out = {}
    for name, mask in masks.items():
        for kind, rows in (("fresh", valids & ~replayed), ("replayed", valids & replayed)):
            if bool(rows.any()):
                out[f"clip/{name}_{kind}"] = float(mask[rows].float().mean())
    return out


def learning_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, mb: dict[str, Any],
                  valids: torch.Tensor, cfg: Any, group: Any = None,
                  advantage_stats: RunningMeanStd | None = None,
                  vmpo_duals: tuple[torch.Tensor, torch.optim.Optimizer] | None = None) -> dict[str, float]:
    """One APPO minibatch step on ``model`` (an ``ActorCritic``): forward, targets, loss, backward,
    gradient clipping and ``optimizer.step()``. Needs no process or queue.

    Args:
        mb: a minibatch shaped like ``TrajectoryBuffers.tensors()`` with ``B`` trajectories:
            ``obs {key: [B, T+1, ...]}``, ``rnn_states [B, T+1, S]``, ``actions``, ``log_probs``,
            ``action_params``, ``values``, ``rewards``, ``terminated``, ``truncated``, ``trunc_values``,
            ``active`` (``[B, T]`` bool: the agent's own steps; the others are transparent in the targets).
            With ``target_returns`` and ``target_advantages`` (``[B, T]``, :func:`iteration_targets`'s, e.g. one-step
            trajectories of ``--minibatch_unit=transitions``) those are the targets, not recomputed here (the
            advantages are still normalised as ``--advantage_normalization`` says).
        valids: ``[B, T]`` bool, the samples that count.
        cfg: read for ``APPOParams`` and ``use_rnn``, ``recurrence``, ``normalize_returns``, ``max_grad_norm``.
        group: a :class:`~sfx.engine.data_parallel.GradientGroup` when this policy's learners run on several
            ranks: the update is then the one of all ranks' minibatches together (advantage and returns
            statistics over all of them, each rank's loss weighted by its share of the valid samples,
            gradients summed), and a non-finite minibatch on any rank is skipped on all. With
            ``--exploration_loss=symmetric_kl`` its cap of 30 applies to each rank's mean.
        advantage_stats: with ``--advantage_normalization`` resolving to running, the running statistics of the advantages
            (the learner keeps them): this minibatch's valid advantages are folded in, and the advantages are
            divided by their (unbiased) std instead of the minibatch's own. None: the minibatch's own std.
        vmpo_duals: with ``--policy_loss=vmpo``, V-MPO's ``[2]`` learned parameters (temperature and KL multiplier,
            ``sfx.algo.policy_losses.vmpo_duals``; ``[3]`` with ``--vmpo_kl_bounds=decoupled``: the temperature and
            the mean's and the covariance's multipliers, ``vmpo_decoupled_duals``) and their own optimizer: they
            descend their dual losses with the same backward pass, outside the model's gradient clipping (their
            gradients are of order 1 whatever the network's, and would otherwise take the clip's budget), summed over
            ranks like the model's.

    Returns:
        The step's statistics: ``loss/total``, ``loss/<term>`` (auxiliary terms too: ``loss/aux_*``),
        ``entropy``, ``kl``, ``grad_norm``, ``ratio_mean``, ``adv_std``, ``value_mean``, ``target_mean``.

    Raises:
        NonFiniteBatch: targets, loss or gradients not finite; the weights are unchanged.
    """
    params = APPOParams.from_cfg(cfg)
    n, T = mb["rewards"].shape
    done = mb["terminated"] | mb["truncated"]
    # Recompute the whole batch with current weights, `recurrence` steps at a time, starting
    # each chunk from the recurrent state the behaviour policy had there.
    popart = model.popart
    tasks = mb["task"] if popart is not None else None  # PopArt: each trajectory's task
    memory = mb["memory"] if model.memory_len else None  # a memory core: the memory before each trajectory
    out = model.forward_trajectories(mb["obs"], mb["rnn_states"], done, cfg.recurrence if cfg.use_rnn else T, tasks,
                                     memory)
    space = model.action_space
    dist = make_action_distribution(space, out.action_params.reshape(n * T, -1))
    log_prob = dist.log_prob(mb["actions"].reshape(n * T, -1)).reshape(n, T)
    old_dist = make_action_distribution(space, mb["action_params"].reshape(n * T, -1))

    reduce = group.sum if group is not None else None
    if TARGET_FIELDS[0] in mb:
        # --minibatch_unit=transitions: single steps of many trajectories, whose targets were computed over the
        # whole trajectories at the iteration's start (iteration_targets); only their normalisation is per minibatch
        targets = Targets(returns=mb["target_returns"], advantages=mb["target_advantages"])
        if advantage_stats is None and popart is None:
            targets = targets._replace(advantages=normalize_advantages(targets.advantages, valids, reduce))
    else:
        values = out.values.detach()
        log_rhos = log_prob.detach() - mb["log_probs"] if params.estimator == "vtrace" else None
        # the agent's inactive steps are transparent in the targets (their values are never trained); `valids`
        # also drops lagging samples, which are still steps of the agent. PopArt scales the advantages below, once
        # every task has its statistics
        targets = appo_targets(mb["rewards"], mb["terminated"], mb["truncated"], mb["trunc_values"], values,
                               out.bootstrap_values, log_rhos, valids, params, reduce, active=mb["active"],
                               normalize=advantage_stats is None and popart is None)
    bad = not (bool(torch.isfinite(targets.returns).all()) and bool(torch.isfinite(targets.advantages).all()))
    # with ranks every rank joins the vote, bad or not: a rank that skipped it would pair its next
    # collective with the others' vote
    if group.any(bad) if group is not None else bad:
        raise NonFiniteBatch("value targets / advantages")
    first_stats = None
    if popart is not None:
        # a task's first statistics come from its first minibatch before that minibatch's loss (as the returns
        # normalizer's do), so its first value loss is on normalised targets too, not on the reward scale
        first_stats = popart.first_statistics(targets.returns, tasks, valids, reduce=reduce)
        # each task's policy gradient on the scale of its normalised targets (advantage / its sigma), its first
        # minibatch too (by the sigma just set, not the initial 1: a x1000 task's would stay in reward units)
        scaled = targets.advantages * popart.sigma(tasks).reciprocal().to(targets.advantages.dtype).unsqueeze(1)
        if advantage_stats is None:
            scaled = normalize_advantages(scaled, valids, reduce)
        targets = targets._replace(advantages=scaled)
    if advantage_stats is not None:
        # --advantage_normalization=running: the policy-gradient scale follows the advantages' spread over the
        # whole run, not this minibatch's. Once the policy is good, advantages shrink to noise; dividing by
        # the minibatch's own std would blow that noise up to unit scale and keep taking full-size steps on
        # it (CartPole then unlearns keeping the cart centred, again and again: README, "The main job's stability").
        # Unbiased like the minibatch std, so the first minibatch is normalized exactly as before.
        advantage_stats.update(targets.advantages[valids], reduce=reduce)
        count = advantage_stats.count
        std = (advantage_stats.var * count / (count - 1).clamp(min=1.0)).sqrt()
        targets = targets._replace(advantages=normalize_advantages(targets.advantages, valids, reduce, std=std))
    with torch.no_grad():
        if cfg.normalize_returns and model.returns_normalizer is not None:
            model.returns_normalizer.update(targets.returns[valids], reduce=reduce)
        returns_norm = model.normalize_values(targets.returns, tasks)
        old_values_norm = model.normalize_values(mb["values"], tasks)

    replayed = None
    if "replayed" in mb:
        replayed = mb["replayed"].reshape(-1, 1).expand_as(valids) if mb["replayed"].dim() == 1 else mb["replayed"]
    terms = appo_loss_terms(dist, old_dist, log_prob, mb["log_probs"], targets, returns_norm, out.values,
                            out.values_normalized, old_values_norm, valids, params,
                            None if vmpo_duals is None else vmpo_duals[0], replayed)
    loss = None
    for name, coeff in params.coefficients.items():
        weighted = coeff * getattr(terms, name)
        loss = weighted if loss is None else loss + weighted
    aux_terms = {}
    aux_coeffs = {"aux_reconstruction": cfg.aux_loss_reconstruction_coeff,
                  "aux_future_pred": cfg.aux_loss_future_pred_coeff}
    if model.aux is not None and any(aux_coeffs[name] for name in model.aux.enabled):
        # Brain Agent's auxiliary losses: extra named terms from the model's heads. A coefficient of 0 adds
        # nothing (not even a zero gradient), so the step is exactly the one without that head.
        aux_terms = model.aux.loss_terms(mb["obs"], out.encoder_features, out.core_outputs, mb["actions"], done, valids)
        for name, term in aux_terms.items():
            if aux_coeffs[name]:
                loss = loss + aux_coeffs[name] * term
    clear_coeffs = {"clear_policy_cloning": cfg.clear_policy_coeff, "clear_value_cloning": cfg.clear_value_coeff}
    if "replayed" in mb and any(clear_coeffs.values()):
        # CLEAR (Rolnick et al. 2019): on replayed samples, stay close to the policy and values they were
        # acted with (KL(mu || pi), squared value difference in the value head's units)
        kl = old_dist.kl_divergence(dist).reshape(n, T)
        cloning = clear_cloning_terms(kl, out.values_normalized, old_values_norm, valids, mb["replayed"])
        aux_terms = {**aux_terms, "clear_policy_cloning": cloning.policy_cloning,
                     "clear_value_cloning": cloning.value_cloning}
        for name in clear_coeffs:
            if clear_coeffs[name]:
                loss = loss + clear_coeffs[name] * aux_terms[name]

    share = None
    if group is not None:  # a collective: every rank, whatever its loss (the vote on it comes next)
        # this rank's share of all ranks' valid samples: summed gradients = gradient of the global mean
        local = valids.sum().to(torch.float64)
        share = local / group.sum(local.reshape(1))[0].clamp(min=1.0)
    if vmpo_duals is not None:
        vmpo_duals[0].grad = None  # the backward pass below fills it
    grad_norm = gradient_step(loss, optimizer, model.parameters(), max_grad_norm=cfg.max_grad_norm, group=group,
                              weight=share)
    if vmpo_duals is not None:
        raw, dual_optimizer = vmpo_duals
        if group is not None:
            group.sum_gradients([raw])
        if raw.grad is not None and bool(torch.isfinite(raw.grad).all()):
            dual_optimizer.step()
    popart_stats = {}
    if popart is not None:
        # after the step (van Hasselt et al. 2016): the tasks' statistics move towards this minibatch's
        # targets, and the value head is rescaled so its unnormalised outputs stay what they were, but for the
        # move of each task's mean, which they follow (sfx.algo.popart, "Following the mean")
        popart.update(targets.returns, tasks, valids, model.value_head, reduce=reduce, skip=first_stats)
        popart_stats = popart_summary(popart, targets.returns, tasks, valids)

    if "replayed" in mb:
        stats_replay = replay_clip_summary(log_prob, mb, targets.advantages, out.values_normalized, old_values_norm,
                                           returns_norm, valids, params)
    names = {"exploration": f"loss/{cfg.exploration_loss}"}
    stats = {"loss/total": loss.item()}
    stats.update({names.get(name, f"loss/{name}"): getattr(terms, name).item() for name in LOSS_TERMS})
    stats.update({f"loss/{name}": term.item() for name, term in aux_terms.items()})
    stats.update({name: float(value) for name, value in (terms.policy_stats or {}).items()})
    stats.update(popart_stats)
    if "replayed" in mb:
        stats.update(stats_replay)
    stats.update({
        "entropy": terms.entropy.item(), "kl": terms.kl.item(), "grad_norm": grad_norm.item(),
        "ratio_mean": terms.ratio_mean.item(), "adv_std": terms.adv_std.item(),
        "value_mean": terms.value_mean.item(), "target_mean": terms.target_mean.item(),
    })
    return stats


@torch.no_grad()
def iteration_targets(model: torch.nn.Module, data: Mapping[str, Any], valids: torch.Tensor, cfg: Any) -> Targets:
    """The value targets and (not yet normalised) advantages of a whole iteration's trajectories, with the model's
    current weights, for ``--minibatch_unit=transitions``: GAE (and every estimator) needs the rest of each step's
    trajectory, so they are computed once over whole trajectories before the first epoch, as Stable-Baselines3's
    PPO computes GAE once per rollout (with the acting values; here the learner's at the iteration's start, which
    are those when the learner is not behind, e.g. ``--serial_mode``).

    Args:
        data: ``[B, T(+1), ...]`` trajectories, as :func:`learning_step`'s ``mb`` (a model without a recurrent core).
        valids: ``[B, T]`` bool.
        cfg: read for ``APPOParams``.

    Returns:
        ``Targets(returns, advantages)``, ``[B, T]`` each; V-trace's ratios are the current policy's over the
        behaviour's.
    """
    params = APPOParams.from_cfg(cfg)
    n, T = data["rewards"].shape
    done = data["terminated"] | data["truncated"]
    tasks = data["task"] if model.popart is not None else None
    out = model.forward_trajectories(data["obs"], data["rnn_states"], done, T, tasks, None)
    log_rhos = None
    if params.estimator == "vtrace":
        dist = make_action_distribution(model.action_space, out.action_params.reshape(n * T, -1))
        log_rhos = dist.log_prob(data["actions"].reshape(n * T, -1)).reshape(n, T) - data["log_probs"]
    return appo_targets(data["rewards"], data["terminated"], data["truncated"], data["trunc_values"], out.values,
                        out.bootstrap_values, log_rhos, valids, params, active=data["active"], normalize=False)


# ------------------------------------------------------------------------------------------- flags

def add_appo_flags(g: argparse._ActionsContainer) -> None:
    """APPO's flags (Sample Factory 1.x names and defaults)."""
    g.add_argument("--num_batches_per_iteration", type=int, default=1,
                   help="minibatches the learner collects before each training iteration")
    g.add_argument("--ppo_epochs", type=int, default=1, help="passes over each iteration's data")
    g.add_argument("--minibatch_unit", choices=list(MINIBATCH_UNITS), default="auto",
                   help="what a minibatch of --batch_size samples is made of: trajectories = whole trajectories of "
                        "--rollout steps (Sample Factory's APPO; the targets are recomputed with the current weights "
                        "for every minibatch); transitions = single steps shuffled across all the iteration's "
                        "trajectories each epoch (PPO as OpenAI Baselines and Stable-Baselines3 run it), their "
                        "targets computed once per iteration over whole trajectories with the weights at its start; "
                        "needs a model without a recurrent core (--use_rnn=False, no memory core) and no auxiliary "
                        "losses. auto = trajectories")
    g.add_argument("--gae_lambda", type=float, default=0.95,
                   help="GAE lambda (used by the GAE estimator: --advantage_estimator=gae, or auto with "
                        "--with_vtrace=False), in [0, 1]")
    add_bool_arg(g, "with_vtrace", True, "V-trace off-policy correction (IMPALA); False = GAE. Read only with "
                                         "--advantage_estimator=auto")
    g.add_argument("--advantage_estimator", choices=list(ADVANTAGE_ESTIMATORS), default="auto",
                   help="value targets and advantages (the choices of Andrychowicz et al. 2021, 'What Matters in "
                        "On-Policy RL'): auto = vtrace with --with_vtrace, else gae (the command lines written "
                        "before this flag keep their meaning); gae = GAE with --gae_lambda; vtrace = V-trace with "
                        "--vtrace_rho/--vtrace_c/--vtrace_lambda; nstep = N-step returns, --n_step of the agent's "
                        "steps then the value; mc = Monte-Carlo returns to the episode's end (bootstrapped from the "
                        "value where the rollout ends first: GAE with lambda 1). All but vtrace take the samples as "
                        "on-policy. A time limit bootstraps, a termination does not, for every estimator")
    g.add_argument("--n_step", type=int, default=5,
                   help="with --advantage_estimator=nstep: rewards (agent steps) summed before bootstrapping from the "
                        "value, >= 1 (1 = one-step TD; >= --rollout = mc)")
    g.add_argument("--policy_loss", choices=list(POLICY_LOSSES), default="ppo",
                   help="policy loss on the advantages (Andrychowicz et al. 2021's choices): ppo = PPO's clipped "
                        "surrogate (--ppo_clip_ratio); vpg = vanilla policy gradient -A log pi (no ratio, no clip); "
                        "awr = advantage-weighted regression, -min(exp(A / --awr_beta), --awr_max_weight) log pi "
                        "(Peng et al. 2019); vmpo = V-MPO (Song et al. 2019): top-half advantages weighted by a "
                        "softmax at a learned temperature bounded by --vmpo_eps_eta, and a KL(behaviour || current) "
                        "constraint with learned Lagrange multipliers (--vmpo_kl_bounds)")
    g.add_argument("--awr_beta", type=float, default=1.0,
                   help="AWR temperature beta, > 0, in the units of the advantages the loss sees (normalized ones: "
                        "--advantage_normalization)")
    g.add_argument("--awr_max_weight", type=float, default=20.0,
                   help="AWR: clip of the weights exp(A / beta), > 0 (the AWR paper's 20)")
    g.add_argument("--vmpo_eps_eta", type=float, default=0.01,
                   help="V-MPO: bound on the KL of the top-half weights from uniform (nats), > 0; the temperature "
                        "eta is learned to meet it")
    g.add_argument("--vmpo_eps_alpha", type=float, default=0.005,
                   help="V-MPO: bound on the mean KL(behaviour || current policy) per sample (nats), > 0; the "
                        "multiplier alpha is learned to meet it")
    g.add_argument("--vmpo_kl_bounds", choices=list(VMPO_KL_BOUNDS), default="single",
                   help="V-MPO's KL constraint: single = one bound --vmpo_eps_alpha on the whole KL (any action space; "
                        "what the on-policy study trained); decoupled = Song et al. 2019's appendix for Gaussian "
                        "policies: the mean's part (covariance held at the behaviour's) bounded by "
                        "--vmpo_eps_alpha_mu and the covariance's part (mean held) by --vmpo_eps_alpha_sigma, each "
                        "with its own multiplier starting at --vmpo_init_alpha; continuous (Box) actions only")
    g.add_argument("--vmpo_eps_alpha_mu", type=float, default=0.005,
                   help="V-MPO, --vmpo_kl_bounds=decoupled: bound on the mean's part of the KL per sample (nats), > 0")
    g.add_argument("--vmpo_eps_alpha_sigma", type=float, default=5e-5,
                   help="V-MPO, --vmpo_kl_bounds=decoupled: bound on the covariance's part of the KL per sample "
                        "(nats), > 0; far below the mean's, so the exploration noise shrinks slowly")
    g.add_argument("--vmpo_init_eta", type=float, default=1.0, help="V-MPO: initial temperature eta, > 0")
    g.add_argument("--vmpo_init_alpha", type=float, default=5.0,
                   help="V-MPO: initial KL multiplier alpha (each of alpha_mu and alpha_sigma with decoupled bounds), "
                        "> 0")
    g.add_argument("--vtrace_rho", type=float, default=1.0, help="V-trace rho-bar: clip of the importance weights")
    g.add_argument("--vtrace_c", type=float, default=1.0, help="V-trace c-bar: clip of the trace-cutting weights")
    g.add_argument("--vtrace_lambda", type=float, default=1.0,
                   help="V-trace lambda, in [0, 1]: multiplies every trace-cutting weight, c_i = lambda min(c-bar, "
                        "rho_i) (IMPALA's remark 2; trfl's and SEED RL's lambda_), trading the targets' variance for "
                        "bias as GAE's lambda does; 1 = plain V-trace")
    g.add_argument("--ppo_clip_ratio", type=float, default=0.1, help="PPO ratio clip: ratio kept in [1-x, 1+x]")
    g.add_argument("--ppo_clip_value", type=float, default=1.0,
                   help="PPO value clip around the old value; <= 0 disables value clipping")
    g.add_argument("--exploration_loss", choices=["entropy", "symmetric_kl"], default="entropy",
                   help="exploration term: entropy = an entropy bonus; symmetric_kl = a penalty on the symmetric KL "
                        "divergence from the uniform policy (discrete actions; Sample Factory's VizDoom setting)")
    g.add_argument("--exploration_loss_coeff", type=float, default=0.003, help="coefficient of the exploration term")
    g.add_argument("--value_loss_coeff", type=float, default=0.5, help="value loss coefficient")
    g.add_argument("--advantage_normalization", choices=["auto", "running", "minibatch"], default="auto",
                   help="how advantages are scaled before the policy loss: all subtract the minibatch's mean; "
                        "running = divide by the std of all advantages so far (the step shrinks as advantages "
                        "shrink to noise once the policy is good), minibatch = by the minibatch's own std "
                        "(PPO's and Sample Factory's way; on CartPole the policy then collapses and recovers "
                        "again and again after reaching 500); auto = running, but minibatch with --popart "
                        "(PopArt rescales each task's advantages by its sigma, which changes units while it "
                        "learns: a statistic over the whole run would mix them)")
    g.add_argument("--kl_loss_coeff", type=float, default=0.0,
                   help="coefficient of KL(behaviour || current) penalty; 0 = off")
    g.add_argument("--lr_schedule_kl_threshold", type=float, default=0.008,
                   help="--lr_schedule=kl_adaptive_*: the KL(behaviour || current) the learning rate is steered to "
                        "(nats per sample; lowered above 2x it, raised below half of it)")
    g.add_argument("--lr_adaptive_min", type=float, default=1e-6,
                   help="--lr_schedule=kl_adaptive_*: the lowest learning rate it may set")
    g.add_argument("--lr_adaptive_max", type=float, default=1e-2,
                   help="--lr_schedule=kl_adaptive_*: the highest learning rate it may set")
    g.add_argument("--replay_parameters", default=None,
                   help="experience replay mixed into each batch, the V-trace replay platform's JSON list, e.g. "
                        "'[{\"type\": \"queue\", \"capacity\": 1, \"sample_ratio\": 0.5}, {\"type\": \"standard\", "
                        "\"capacity\": 1000, \"sample_ratio\": 0.5}]': each buffer gives int(batch x sample_ratio) "
                        "trajectories (ratios sum to 1); queue = the fresh stream, standard = uniform from the last "
                        "capacity trajectories, custom = attentive / elite sampling by feature distance (README, "
                        "Experience replay). None = no replay")
    g.add_argument("--replayed_loss", choices=list(REPLAYED_LOSSES), default="ppo",
                   help="how replayed samples (--replay_parameters) are trained: ppo = like fresh ones, PPO's ratio "
                        "clip and the value clip around the value recorded when they were acted (many versions old: "
                        "the clips leave a share of them without gradient, TensorBoard's clip/*_replayed); impala = "
                        "the V-trace replay platform's IMPALA loss on them: -A log pi with V-trace's rho-clipped "
                        "advantages and an unclipped value loss (fresh samples keep PPO's). Needs --policy_loss=ppo "
                        "and a replaying buffer")
    g.add_argument("--clear_policy_coeff", type=float, default=0.0,
                   help="CLEAR policy cloning on replayed samples: coefficient of KL(behaviour || current); 0 = off")
    g.add_argument("--clear_value_coeff", type=float, default=0.0,
                   help="CLEAR value cloning on replayed samples: coefficient of (V - V_behaviour)^2; 0 = off")


def check_vmpo_kl_bounds(cfg: Any, action_space: Any) -> None:
    """ConfigError unless ``--vmpo_kl_bounds=decoupled`` (with ``--policy_loss=vmpo``) meets Gaussian actions: its
    two parts of the KL are a Gaussian's mean and covariance."""
    if cfg.policy_loss != "vmpo" or cfg.vmpo_kl_bounds != "decoupled":
        return
    dist = make_action_distribution(action_space, torch.zeros(1, action_params_size(action_space)))
    if not isinstance(dist, DiagGaussian):
        raise ConfigError(f"--vmpo_kl_bounds=decoupled bounds a Gaussian's mean and covariance apart; this env's "
                          f"action space {action_space} is not continuous; allowed: a Box action space, or "
                          f"--vmpo_kl_bounds=single")


def validate_appo_cfg(cfg: Any) -> None:
    if not (cfg.lr_schedule_kl_threshold > 0 and math.isfinite(cfg.lr_schedule_kl_threshold)):
        raise ConfigError(f"--lr_schedule_kl_threshold={cfg.lr_schedule_kl_threshold} must be a finite number > 0")
    if not (0 < cfg.lr_adaptive_min <= cfg.lr_adaptive_max < math.inf):
        raise ConfigError(f"--lr_adaptive_min={cfg.lr_adaptive_min} and --lr_adaptive_max={cfg.lr_adaptive_max} must "
                          f"be finite with 0 < min <= max")
    for name in ("num_batches_per_iteration", "ppo_epochs"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"--{name}={value} must be a positive integer (> 0)")
    steps = cfg.num_batches_per_iteration * cfg.ppo_epochs
    if steps >= cfg.max_policy_lag:
        # every minibatch step is a new policy version: what the workers collect while one iteration trains is
        # that many versions old when the next one starts, and would all be dropped as too old
        raise ConfigError(f"--num_batches_per_iteration={cfg.num_batches_per_iteration} x --ppo_epochs={cfg.ppo_epochs}"
                          f" = {steps} minibatch steps (policy versions) per iteration, but --max_policy_lag="
                          f"{cfg.max_policy_lag}: samples collected during one iteration would be too old for the "
                          f"next; raise --max_policy_lag to several times {steps} (samples often wait 2-3 iterations)")
    if cfg.minibatch_unit not in MINIBATCH_UNITS:
        raise ConfigError(f"--minibatch_unit={cfg.minibatch_unit} is not known; allowed: {', '.join(MINIBATCH_UNITS)}")
    if minibatch_unit(cfg) == "transitions":
        # a transition alone cannot be replayed through a recurrent core or a sequence of frames
        needs = {"--use_rnn": cfg.use_rnn, "--aux_loss_reconstruction_coeff": cfg.aux_loss_reconstruction_coeff,
                 "--aux_loss_future_pred_coeff": cfg.aux_loss_future_pred_coeff}
        bad = [f"{name}={value}" for name, value in needs.items() if value]
        if bad:
            raise ConfigError(f"--minibatch_unit=transitions shuffles single steps, which a recurrent core and the "
                              f"auxiliary losses cannot train on ({', '.join(bad)}); allowed: --use_rnn=False and both "
                              f"auxiliary coefficients 0 with transitions, or --minibatch_unit=trajectories")
    if cfg.advantage_estimator not in ADVANTAGE_ESTIMATORS:
        raise ConfigError(f"--advantage_estimator={cfg.advantage_estimator} is not known; allowed: "
                          f"{', '.join(ADVANTAGE_ESTIMATORS)}")
    if cfg.policy_loss not in POLICY_LOSSES:
        raise ConfigError(f"--policy_loss={cfg.policy_loss} is not known; allowed: {', '.join(POLICY_LOSSES)}")
    if cfg.replayed_loss not in REPLAYED_LOSSES:
        raise ConfigError(f"--replayed_loss={cfg.replayed_loss} is not known; allowed: {', '.join(REPLAYED_LOSSES)}")
    if not isinstance(cfg.n_step, int) or isinstance(cfg.n_step, bool) or cfg.n_step < 1:
        raise ConfigError(f"--n_step={cfg.n_step} must be an integer >= 1")
    if cfg.vmpo_kl_bounds not in VMPO_KL_BOUNDS:
        raise ConfigError(f"--vmpo_kl_bounds={cfg.vmpo_kl_bounds} is not known; allowed: {', '.join(VMPO_KL_BOUNDS)}")
    for name in ("vtrace_rho", "vtrace_c", "ppo_clip_ratio", "awr_beta", "awr_max_weight", "vmpo_eps_eta",
                 "vmpo_eps_alpha", "vmpo_eps_alpha_mu", "vmpo_eps_alpha_sigma", "vmpo_init_eta", "vmpo_init_alpha"):
        value = getattr(cfg, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"--{name}={value} must be a finite number > 0")
    for name in ("gae_lambda", "vtrace_lambda"):
        if not 0.0 <= getattr(cfg, name) <= 1.0:
            raise ConfigError(f"--{name}={getattr(cfg, name)} must be in [0, 1]")
    for name in ("exploration_loss_coeff", "value_loss_coeff", "kl_loss_coeff", "clear_policy_coeff",
                 "clear_value_coeff"):
        value = getattr(cfg, name)
        if not (value >= 0 and math.isfinite(value)):
            raise ConfigError(f"--{name}={value} must be a finite number >= 0")
    specs = replay_specs(cfg)
    if specs:
        from sfx.algo.replay import batch_composition

        # every buffer's share of a batch must be whole (the platform's rule): a ConfigError naming it now
        batch_composition(specs, APPO.trajectories_per_iteration(cfg))
    replays = any(s.type != "queue" for s in specs)
    estimator = advantage_estimator(cfg)
    if replays and estimator != "vtrace":
        # GAE (N-step, MC) takes every sample as on-policy: replayed trajectories, many versions old, would be
        # trained on uncorrected (the doom family defaults to GAE, so this would happen silently there)
        how = "--with_vtrace=False (GAE)" if cfg.advantage_estimator == "auto" else \
            f"--advantage_estimator={cfg.advantage_estimator}"
        raise ConfigError(f"--replay_parameters={cfg.replay_parameters} replays old trajectories, which only V-trace "
                          f"corrects for; {how} does not: allowed: V-trace (--advantage_estimator=vtrace, or auto "
                          f"with --with_vtrace=True) with replay, or no replaying buffer (--replay_parameters=None, "
                          f"or queue only)")
    if cfg.replayed_loss == "impala" and not (replays and cfg.policy_loss == "ppo"):
        raise ConfigError(f"--replayed_loss=impala trains replayed samples with IMPALA's loss instead of PPO's: it needs "
                          f"--policy_loss=ppo (now {cfg.policy_loss}) and --replay_parameters with a standard or custom "
                          f"buffer (now {cfg.replay_parameters!r})")
    if (cfg.clear_policy_coeff or cfg.clear_value_coeff) and not replays:
        raise ConfigError(f"--clear_policy_coeff / --clear_value_coeff clone on replayed samples: set "
                          f"--replay_parameters with a standard or custom buffer (now: {cfg.replay_parameters!r})")


def replay_specs(cfg: Any) -> tuple:
    """``--replay_parameters`` parsed (``()`` without replay); ConfigError naming a bad entry."""
    if not cfg.replay_parameters:
        return ()
    from sfx.algo.replay import parse_replay_parameters  # only runs with replay on

    return tuple(parse_replay_parameters(cfg.replay_parameters))


def replay_needs_features(specs: tuple) -> bool:
    """A custom buffer samples or inserts by feature distance: the acting rule stores the core's outputs."""
    return any(s.needs_features for s in specs)


# ------------------------------------------------------------------------------------------- acting

class APPOActingRule(ActingRule):
    """Sample from the policy head's distribution (its mode with ``deterministic``); store the action's
    log-prob, the distribution's parameters (for the KL terms) and the value; a time-limit step's final
    observation gets its value computed with the acting weights (``trunc_values``, bootstrapped from).
    With ``feature_size`` (replay with a custom buffer) also the policy trunk's core output (``features``),
    which attentive and elite sampling compare with the same trajectory's features under newer weights."""

    truncation_field = "trunc_values"

    def __init__(self, action_space: Any, feature_size: int = 0) -> None:
        self.action_space = action_space
        self._sizes = categorical_sizes(action_space)
        self.fields = {"log_probs": FieldSpec(()), "action_params": FieldSpec((action_params_size(action_space),)),
                       "values": FieldSpec(()), "trunc_values": FieldSpec(())}
        self.feature_size = int(feature_size)
        if self.feature_size:
            self.fields["features"] = FieldSpec((self.feature_size,))

    def act(self, out: Mapping[str, torch.Tensor], deterministic: bool = False,
            actor_ids: torch.Tensor | None = None) -> Acted:
        params = out["action_params"]
        n = params.shape[0]
        dist = make_action_distribution(self.action_space, params)
        actions = self.mode_actions(out) if deterministic else dist.sample()
        log_probs = dist.log_prob(actions)
        fields = {"log_probs": log_probs, "action_params": params, "values": out["values"]}
        if self.feature_size:
            fields["features"] = out["core_output"]
        return Acted(actions.float().reshape(n, -1), fields)

    def mode_actions(self, out: Mapping[str, torch.Tensor]) -> torch.Tensor:
        params = out["action_params"]
        if self._sizes is None:
            return params[:, :params.shape[1] // 2]  # DiagGaussian's mode: the mean
        # Categorical's mode: the argmax of the log-probabilities, per head
        return torch.cat([torch.log_softmax(logits, dim=-1).argmax(dim=-1, keepdim=True)
                          for logits in torch.split(params, self._sizes, dim=-1)], dim=1)

    def truncation_values(self, out: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return out["values"]


# ------------------------------------------------------------------------------------------- the agent

class APPO(Agent):
    """Asynchronous PPO with V-trace (or GAE): see the module docstring."""

    name = "APPO"
    # apply_params: every learning rate is its flag times lr_scale; step runs the KL-adaptive schedules
    lr_schedules = LR_SCHEDULES
    flag_group = "APPO (--algo=APPO)"

    @classmethod
    def add_flags(cls, parser: argparse._ActionsContainer) -> None:
        add_appo_flags(parser)

    @classmethod
    def validate(cls, cfg: Any) -> None:
        validate_appo_cfg(cfg)

    @classmethod
    def trajectories_per_iteration(cls, cfg: Any) -> int:
        return trajectories_per_minibatch(cfg) * cfg.num_batches_per_iteration

    @classmethod
    def batches_ahead(cls, cfg: Any) -> int:
        # One batch ahead (lag ~1 when the learner sets the pace) for every estimator. GAE's targets take the
        # samples as on-policy (doom_basic, README "Late learning": 69.8 at lag 1, 64.5 at lag 3). V-trace
        # corrects the policy gradient for lag, but not the core's state or memory stored at acting time:
        # without a gate a learner that sets the pace trains every batch slots / batch iterations late
        # (MiniGrid MemoryS7, TrXL, the README's line with the learner slowed: lag 34, success 0.55 at 300k
        # env steps, where a learner with slack trains at lag 7.5 and reaches 0.9 at 0.12M-0.36M); on doom
        # V-trace ended at 55-66 at every lag (59.9 at lag 1, 64.7 at lag 3, one seed)
        return 1

    @classmethod
    def acting_rule(cls, cfg: Any, action_space: Any) -> ActingRule:
        check_vmpo_kl_bounds(cfg, action_space)
        # the built-in trunks' core outputs are --hidden_size wide (the learner checks the model's)
        return APPOActingRule(action_space, cfg.hidden_size if replay_needs_features(replay_specs(cfg)) else 0)

    @classmethod
    def check_model(cls, cfg: Any, model: torch.nn.Module) -> None:
        if minibatch_unit(cfg) == "transitions" and model.memory_len:
            raise ConfigError(f"--minibatch_unit=transitions shuffles single steps; this model's core keeps a memory "
                              f"of {model.memory_len} steps (--rnn_type={cfg.rnn_type}), which they cannot be trained "
                              f"without; allowed: a model without a recurrent core, or --minibatch_unit=trajectories")
        if replay_needs_features(replay_specs(cfg)):
            # the acting rule's `features` field is sized before any model exists, from --hidden_size
            width = getattr(getattr(model, "trunks", [None])[0], "out_size", None)
            if width != cfg.hidden_size:
                raise ConfigError(f"a custom replay buffer compares the core's output features, {cfg.hidden_size} "
                                  f"wide (--hidden_size); this model's are {width}: allowed: a model whose policy "
                                  f"trunk gives --hidden_size features, or standard buffers only")

    @classmethod
    def host_memory_bytes(cls, cfg: Any, trajectory_bytes: int) -> int:
        return sum(s.capacity for s in replay_specs(cfg) if s.type != "queue") * trajectory_bytes

    @classmethod
    def pbt_hyperparameters(cls, cfg: Any) -> dict[str, tuple[float, float]]:
        return {"learning_rate": (1e-6, 1e-2), "exploration_loss_coeff": (1e-6, 0.1),
                "value_loss_coeff": (0.01, 5.0), "max_grad_norm": (0.1, 100.0),
                "ppo_clip_ratio": (0.02, 0.5), "ppo_clip_value": (0.01, 20.0)}

    def __init__(self, cfg: Any, model: torch.nn.Module, device: torch.device, group: Any = None) -> None:
        super().__init__(cfg, model, device, group)
        self.optimizer = make_optimizer(cfg, model)
        # --advantage_normalization resolving to running: the advantages' statistics over the whole run
        self.advantage_stats = (RunningMeanStd((), clip=None).to(device)
                                if running_advantage_normalization(cfg) else None)
        self.replay = replay_specs(cfg)
        self.check_model(cfg, model)
        check_vmpo_kl_bounds(cfg, model.action_space)
        # V-MPO's temperature and KL multiplier(s): learned, not part of the model (the policy workers never need
        # them); [eta, alpha], or [eta, alpha_mu, alpha_sigma] with decoupled bounds
        self.vmpo_duals = None
        if cfg.policy_loss == "vmpo":
            alpha_sigma = cfg.vmpo_init_alpha if cfg.vmpo_kl_bounds == "decoupled" else None
            raw = torch.nn.Parameter(vmpo_dual_init(cfg.vmpo_init_eta, cfg.vmpo_init_alpha, alpha_sigma).to(device))
            self.vmpo_duals = (raw, fused_adam([raw], lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                               eps=cfg.adam_eps))
        self._start_epochs(cfg.ppo_epochs)  # minibatches() sets each iteration's; steps taken without it: 1 each

    def sample_source(self, fresh: Any) -> Any:
        if not any(s.type != "queue" for s in self.replay):
            return fresh
        from sfx.agents.replay import ReplayMix

        return ReplayMix(fresh, self.replay, lambda: self.trajectories_per_iteration(self.cfg), self.device,
                         features=self.features if replay_needs_features(self.replay) else None, seed=self.cfg.seed)

    @torch.no_grad()
    def features(self, data: dict[str, Any]) -> torch.Tensor:
        """``[n, T, H]``: the current weights' core outputs over stored trajectories (custom replay buffers)."""
        n, T = data["rewards"].shape
        done = data["terminated"] | data["truncated"]
        tasks = data["task"] if self.model.popart is not None else None
        memory = data["memory"] if self.model.memory_len else None
        out = self.model.forward_trajectories(data["obs"], data["rnn_states"], done,
                                              self.cfg.recurrence if self.cfg.use_rnn else T, tasks, memory)
        return out.core_outputs[:, :T].reshape(n, T, -1)

    def minibatches(self, batch: Batch) -> Iterator[tuple[dict[str, Any], torch.Tensor]]:
        data = batch.data if bool(batch.fresh.all()) else {**batch.data, "replayed": ~batch.fresh}
        if minibatch_unit(self.cfg) == "transitions":
            yield from self._transition_minibatches(batch, data)
            return
        n = batch.num_trajectories
        # every epoch's order is drawn before the first step (the random stream of the learner is the same
        # whatever the steps draw)
        per_mb = trajectories_per_minibatch(self.cfg)
        orders = trajectory_minibatches(n, per_mb, self.cfg.ppo_epochs, self.device)
        self._start_epochs(len(orders))
        if per_mb >= n:
            # one minibatch is the whole batch (the default: 1 minibatch, 1 epoch): the loss sums over its
            # trajectories in any order, so the batch goes as it is, without a shuffled copy of every frame
            # (the negligible-model doom learner spent 16% of its time on that copy)
            for _ in orders:
                yield data, batch.valids
            return
        for mb in orders:  # one minibatch's copy at a time
            yield tree_map(lambda v: v[mb], data), batch.valids[mb]

    def _transition_minibatches(self, batch: Batch, data: dict[str, Any]) -> Iterator[tuple[dict[str, Any],
                                                                                              torch.Tensor]]:
        """``--minibatch_unit=transitions``: the targets of the whole trajectories with the weights at the
        iteration's start, then each epoch's shuffle of single steps, ``--batch_size`` a minibatch, as one-step
        trajectories (``[M, 1]``; observations ``[M, 2]``: the step's and the next)."""
        n, T = batch.valids.shape
        targets = iteration_targets(self.model, data, batch.valids, self.cfg)
        data = {**data, "target_returns": targets.returns, "target_advantages": targets.advantages}
        orders = transition_minibatches(n, T, self.cfg.batch_size, self.cfg.ppo_epochs, self.device)
        self._start_epochs(len(orders))
        for traj, step in orders:
            yield gather_transitions(data, traj, step), batch.valids[traj, step].unsqueeze(1)

    def _start_epochs(self, num_minibatches: int) -> None:
        """An iteration of ``num_minibatches`` steps over ``--ppo_epochs`` epochs begins (kl_adaptive_epoch)."""
        self._steps_per_epoch = num_minibatches // self.cfg.ppo_epochs
        self._epoch_steps = 0
        self._epoch_kls: list[float] = []

    def step(self, mb: dict[str, Any], valids: torch.Tensor) -> dict[str, float]:
        kl_adaptive = self.cfg.lr_schedule in KL_ADAPTIVE_SCHEDULES
        try:
            stats = learning_step(self.model, self.optimizer, mb, valids, self.cfg, self.group, self.advantage_stats,
                                  self.vmpo_duals)
        except NonFiniteBatch:
            if kl_adaptive:
                self._kl_step(None)  # applied nothing: counts for the epoch, adds no KL to its mean
            raise
        if kl_adaptive:
            self._kl_step(stats["kl"])
        return stats

    def _kl_step(self, kl: float | None) -> None:
        """--lr_schedule=kl_adaptive_*: after a step whose KL(behaviour || current) was ``kl`` (None: skipped),
        adapt the rate to it (``_minibatch``) or, at an epoch's last step, to the epoch's mean (``_epoch``)."""
        if kl is not None:
            kl = self._mean_over_ranks(kl)
        if self.cfg.lr_schedule == "kl_adaptive_minibatch":
            if kl is not None:
                self._adapt_lr(kl)
            return
        self._epoch_steps += 1
        if kl is not None:
            self._epoch_kls.append(kl)
        if self._epoch_steps >= self._steps_per_epoch:
            if self._epoch_kls:
                self._adapt_lr(sum(self._epoch_kls) / len(self._epoch_kls))
            self._epoch_steps, self._epoch_kls = 0, []

    def _mean_over_ranks(self, value: float) -> float:
        """The ranks' mean (every rank then sets the same learning rate, so the weights stay equal)."""
        if self.group is None:
            return value
        return float(self.group.sum(torch.tensor([value], dtype=torch.float64))[0]) / self.group.world_size

    def _adapt_lr(self, kl: float) -> None:
        """--lr_schedule=kl_adaptive_*: the next rate from ``kl`` (sfx.algo.schedules.kl_adaptive_lr), as a scale of
        --learning_rate (PBT's new value keeps it)."""
        cfg = self.cfg
        lr = kl_adaptive_lr(cfg.learning_rate * self.lr_scale, kl, cfg.lr_schedule_kl_threshold, cfg.lr_adaptive_min,
                            cfg.lr_adaptive_max)
        self.set_lr_scale(lr / cfg.learning_rate)

    def learning_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"optimizer": self.optimizer.state_dict()}
        if self.advantage_stats is not None:
            state["advantage_stats"] = self.advantage_stats.state_dict()
        if self.vmpo_duals is not None:
            state["vmpo_duals"] = self.vmpo_duals[0].detach().clone()
            state["vmpo_optimizer"] = self.vmpo_duals[1].state_dict()
        if self.cfg.lr_schedule in KL_ADAPTIVE_SCHEDULES:
            state["lr_scale"] = self.lr_scale  # the adapted rate (a linear decay's is recomputed from env steps)
        return state

    def load_learning_state(self, state: Mapping[str, Any]) -> None:
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        # a checkpoint written before the running advantage statistics existed (or with
        # --advantage_normalization=minibatch) starts them afresh: they settle within a few minibatches
        if self.advantage_stats is not None and "advantage_stats" in state:
            self.advantage_stats.load_state_dict(state["advantage_stats"])
        # a checkpoint of another policy loss (or of before V-MPO existed), or of the other --vmpo_kl_bounds (one
        # multiplier, not two, or the reverse), starts eta and the multipliers at their flags
        if (self.vmpo_duals is not None and "vmpo_duals" in state
                and state["vmpo_duals"].shape == self.vmpo_duals[0].shape):
            with torch.no_grad():
                self.vmpo_duals[0].copy_(state["vmpo_duals"])
            self.vmpo_duals[1].load_state_dict(state["vmpo_optimizer"])
        if self.cfg.lr_schedule in KL_ADAPTIVE_SCHEDULES and "lr_scale" in state:
            self.set_lr_scale(float(state["lr_scale"]))

    def apply_params(self, params: Mapping[str, Any]) -> None:
        optimizers = [self.optimizer] + ([self.vmpo_duals[1]] if self.vmpo_duals is not None else [])
        for optimizer in optimizers:
            for group in optimizer.param_groups:
                group["lr"] = float(self.cfg.learning_rate) * self.lr_scale

    def current_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])
