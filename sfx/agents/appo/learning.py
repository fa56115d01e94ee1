"""APPO's learning step (Sample Factory's algorithm): one minibatch step is :func:`learning_step`: the model
recomputes the trajectories (``ActorCritic.forward_trajectories``), :mod:`sfx.algo.appo` gives the targets
(``--advantage_estimator``: V-trace, GAE, N-step or Monte-Carlo returns) and the named loss terms (``--policy_loss``:
PPO's clipped surrogate, vanilla PG, AWR or V-MPO: the choices of the on-policy study, Andrychowicz et al. 2021),
the auxiliary and CLEAR terms join them, one sum of ``coefficient * term`` is the loss, and the kit's
:func:`~sfx.agents.kit.gradient_step` clips the gradient and steps Adam. It runs without any process or queue
(tests, ``bench/learner_step.py``).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, NamedTuple

import torch

from sfx.agents.appo.flags import APPOConfig, check_vmpo_kl_bounds, replay_needs_features, replay_specs, \
    running_advantage_normalization
from sfx.agents.base import Agent, Batch, NonFiniteBatch, tree_map
from sfx.agents.kit import fused_adam, gradient_step
from sfx.algo.appo import LOSS_TERMS, APPOParams, LossTerms, appo_loss_terms, appo_targets, normalize_advantages
from sfx.algo.clear import clear_cloning_terms
from sfx.algo.distributions import ActionDistribution, make_action_distribution
from sfx.algo.minibatches import gather_transitions, trajectory_minibatches, transition_minibatches
from sfx.algo.normalizers import RunningMeanStd
from sfx.algo.policy_losses import vmpo_dual_init
from sfx.algo.ppo import ppo_policy_no_gradient, ppo_value_no_gradient
from sfx.algo.schedules import KL_ADAPTIVE_SCHEDULES, kl_adaptive_lr
from sfx.algo.targets import Targets

__all__ = ["APPOLearning", "TARGET_FIELDS", "iteration_targets", "learning_step", "make_optimizer", "popart_summary",
           "replay_clip_summary"]

# a minibatch step on precomputed targets (--minibatch_unit=transitions): iteration_targets' result, per sample
TARGET_FIELDS = ("target_returns", "target_advantages")


def make_optimizer(cfg: Any, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The learner's optimizer: Adam with ``--learning_rate``, ``--adam_beta1/2``, ``--adam_eps``; PyTorch's fused
    kernel where every parameter is on CUDA (the kit's ``fused_adam``: one launch per step for all tensors), the
    plain one on the CPU (its numerics unchanged)."""
    return fused_adam(model.parameters(), lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                      eps=cfg.adam_eps)


def _config(config: APPOConfig | Any) -> APPOConfig:
    return config if isinstance(config, APPOConfig) else APPOConfig.from_cfg(config)


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


class _Forward(NamedTuple):
    """The current weights' view of a minibatch: the model's outputs and the action distributions."""

    out: Any
    dist: ActionDistribution
    old_dist: ActionDistribution
    log_prob: torch.Tensor
    tasks: torch.Tensor | None
    done: torch.Tensor


def _forward(model: torch.nn.Module, mb: dict[str, Any], config: APPOConfig) -> _Forward:
    """Recompute the whole batch with current weights, ``--recurrence`` steps at a time, starting each chunk from
    the recurrent state the behaviour policy had there."""
    n, T = mb["rewards"].shape
    done = mb["terminated"] | mb["truncated"]
    tasks = mb["task"] if model.popart is not None else None  # PopArt: each trajectory's task
    memory = mb["memory"] if model.memory_len else None  # a memory core: the memory before each trajectory
    out = model.forward_trajectories(mb["obs"], mb["rnn_states"], done,
                                     T if config.recurrence is None else config.recurrence, tasks, memory)
    space = model.action_space
    dist = make_action_distribution(space, out.action_params.reshape(n * T, -1))
    log_prob = dist.log_prob(mb["actions"].reshape(n * T, -1)).reshape(n, T)
    old_dist = make_action_distribution(space, mb["action_params"].reshape(n * T, -1))
    return _Forward(out, dist, old_dist, log_prob, tasks, done)


def _targets(model: torch.nn.Module, mb: dict[str, Any], valids: torch.Tensor, fw: _Forward, params: APPOParams,
             group: Any, advantage_stats: RunningMeanStd | None) -> tuple[Targets, Any]:
    """The value targets and the normalised advantages, and PopArt's first statistics (None without PopArt or
    when every task had some).

    Raises:
        NonFiniteBatch: targets or advantages not finite (on any rank).
    """
    popart, tasks = model.popart, fw.tasks
    reduce = group.sum if group is not None else None
    if TARGET_FIELDS[0] in mb:
        # --minibatch_unit=transitions: single steps of many trajectories, whose targets were computed over the
        # whole trajectories at the iteration's start (iteration_targets); only their normalisation is per minibatch
        targets = Targets(returns=mb["target_returns"], advantages=mb["target_advantages"])
        if advantage_stats is None and popart is None:
            targets = targets._replace(advantages=normalize_advantages(targets.advantages, valids, reduce))
    else:
        values = fw.out.values.detach()
        log_rhos = fw.log_prob.detach() - mb["log_probs"] if params.estimator == "vtrace" else None
        # the agent's inactive steps are transparent in the targets (their values are never trained); `valids`
        # also drops lagging samples, which are still steps of the agent. PopArt scales the advantages below, once
        # every task has its statistics
        targets = appo_targets(mb["rewards"], mb["terminated"], mb["truncated"], mb["trunc_values"], values,
                               fw.out.bootstrap_values, log_rhos, valids, params, reduce, active=mb["active"],
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
        # the minibatch's own std would blow that noise up to unit scale and keep taking full-size steps on it.
        # Unbiased like the minibatch std, so the first minibatch is normalized exactly as before.
        advantage_stats.update(targets.advantages[valids], reduce=reduce)
        count = advantage_stats.count
        std = (advantage_stats.var * count / (count - 1).clamp(min=1.0)).sqrt()
        targets = targets._replace(advantages=normalize_advantages(targets.advantages, valids, reduce, std=std))
    return targets, first_stats


def _replayed(mb: dict[str, Any], valids: torch.Tensor) -> torch.Tensor | None:
    """``[B, T]`` bool: the replayed samples (None: every sample is fresh)."""
    if "replayed" not in mb:
        return None
    return mb["replayed"].reshape(-1, 1).expand_as(valids) if mb["replayed"].dim() == 1 else mb["replayed"]


def _extra_terms(model: torch.nn.Module, mb: dict[str, Any], valids: torch.Tensor, fw: _Forward,
                 old_values_norm: torch.Tensor, config: APPOConfig) -> dict[str, torch.Tensor]:
    """The terms beside APPO's own: Brain Agent's auxiliary losses from the model's heads (when one of their
    coefficients is not 0) and CLEAR's cloning terms (Rolnick et al. 2019) on replayed samples: stay close to the
    policy and values they were acted with (KL(mu || pi), squared value difference in the value head's units)."""
    terms: dict[str, torch.Tensor] = {}
    if model.aux is not None and any(config.aux_coefficients[name] for name in model.aux.enabled):
        terms.update(model.aux.loss_terms(mb["obs"], fw.out.encoder_features, fw.out.core_outputs, mb["actions"],
                                          fw.done, valids))
    if "replayed" in mb and any(config.clear_coefficients.values()):
        n, T = valids.shape
        kl = fw.old_dist.kl_divergence(fw.dist).reshape(n, T)
        cloning = clear_cloning_terms(kl, fw.out.values_normalized, old_values_norm, valids, mb["replayed"])
        terms.update({"clear_policy_cloning": cloning.policy_cloning, "clear_value_cloning": cloning.value_cloning})
    return terms


def _weighted_terms(terms: LossTerms, extra: Mapping[str, torch.Tensor], params: APPOParams,
                    config: APPOConfig) -> list[tuple[float, torch.Tensor]]:
    """Every term of the loss with its coefficient, in the order they are summed: APPO's own (every one, a
    coefficient of 0 too), then the extra terms whose coefficient is not 0 (a 0 adds nothing, not even a zero
    gradient, so the step is exactly the one without that head)."""
    weighted = [(coeff, getattr(terms, name)) for name, coeff in params.coefficients.items()]
    coefficients = {**config.aux_coefficients, **config.clear_coefficients}
    weighted += [(coefficients[name], term) for name, term in extra.items() if coefficients[name]]
    return weighted


def _dual_step(vmpo_duals: tuple[torch.Tensor, torch.optim.Optimizer], group: Any) -> None:
    """V-MPO's duals descend their own losses with the gradients the model's backward pass left them."""
    raw, dual_optimizer = vmpo_duals
    if group is not None:
        group.sum_gradients([raw])
    if raw.grad is not None and bool(torch.isfinite(raw.grad).all()):
        dual_optimizer.step()


def learning_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, mb: dict[str, Any],
                  valids: torch.Tensor, config: APPOConfig | Any, group: Any = None,
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
        config: the agent's :class:`~sfx.agents.appo.flags.APPOConfig` (a parsed cfg is converted here: tests,
            benchmarks).
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
    config = _config(config)
    params = config.params
    fw = _forward(model, mb, config)
    targets, first_stats = _targets(model, mb, valids, fw, params, group, advantage_stats)
    reduce = group.sum if group is not None else None
    with torch.no_grad():
        if config.normalize_returns and model.returns_normalizer is not None:
            model.returns_normalizer.update(targets.returns[valids], reduce=reduce)
        returns_norm = model.normalize_values(targets.returns, fw.tasks)
        old_values_norm = model.normalize_values(mb["values"], fw.tasks)
    terms = appo_loss_terms(fw.dist, fw.old_dist, fw.log_prob, mb["log_probs"], targets, returns_norm, fw.out.values,
                            fw.out.values_normalized, old_values_norm, valids, params,
                            None if vmpo_duals is None else vmpo_duals[0], _replayed(mb, valids))
    extra = _extra_terms(model, mb, valids, fw, old_values_norm, config)
    loss = None
    for coeff, term in _weighted_terms(terms, extra, params, config):  # the one sum of coefficient x term
        loss = coeff * term if loss is None else loss + coeff * term
    share = None
    if group is not None:  # a collective: every rank, whatever its loss (the vote on it comes next)
        # this rank's share of all ranks' valid samples: summed gradients = gradient of the global mean
        local = valids.sum().to(torch.float64)
        share = local / group.sum(local.reshape(1))[0].clamp(min=1.0)
    if vmpo_duals is not None:
        vmpo_duals[0].grad = None  # the backward pass below fills it
    grad_norm = gradient_step(loss, optimizer, model.parameters(), max_grad_norm=config.max_grad_norm, group=group,
                              weight=share)
    if vmpo_duals is not None:
        _dual_step(vmpo_duals, group)
    stats = {"loss/total": loss.item()}
    if model.popart is not None:
        # after the step (van Hasselt et al. 2016): the tasks' statistics move towards this minibatch's
        # targets, and the value head is rescaled so its unnormalised outputs stay what they were, but for the
        # move of each task's mean, which they follow (sfx.algo.popart, "Following the mean")
        model.popart.update(targets.returns, fw.tasks, valids, model.value_head, reduce=reduce, skip=first_stats)
    return _step_stats(stats, model, mb, valids, fw, terms, extra, targets, returns_norm, old_values_norm,
                       grad_norm, params)


def _step_stats(stats: dict[str, float], model: torch.nn.Module, mb: dict[str, Any], valids: torch.Tensor,
                fw: _Forward, terms: LossTerms, extra: Mapping[str, torch.Tensor], targets: Targets,
                returns_norm: torch.Tensor, old_values_norm: torch.Tensor, grad_norm: torch.Tensor,
                params: APPOParams) -> dict[str, float]:
    """The step's statistics (see :func:`learning_step`), after ``stats``' ``loss/total``."""
    names = {"exploration": f"loss/{params.exploration_loss}"}
    stats.update({names.get(name, f"loss/{name}"): getattr(terms, name).item() for name in LOSS_TERMS})
    stats.update({f"loss/{name}": term.item() for name, term in extra.items()})
    stats.update({name: float(value) for name, value in (terms.policy_stats or {}).items()})
    if model.popart is not None:
        stats.update(popart_summary(model.popart, targets.returns, fw.tasks, valids))
    if "replayed" in mb:
        stats.update(replay_clip_summary(fw.log_prob, mb, targets.advantages, fw.out.values_normalized,
                                         old_values_norm, returns_norm, valids, params))
    stats.update({
        "entropy": terms.entropy.item(), "kl": terms.kl.item(), "grad_norm": grad_norm.item(),
        "ratio_mean": terms.ratio_mean.item(), "adv_std": terms.adv_std.item(),
        "value_mean": terms.value_mean.item(), "target_mean": terms.target_mean.item(),
    })
    return stats


@torch.no_grad()
def iteration_targets(model: torch.nn.Module, data: Mapping[str, Any], valids: torch.Tensor,
                      config: APPOConfig | Any) -> Targets:
    """The value targets and (not yet normalised) advantages of a whole iteration's trajectories, with the model's
    current weights, for ``--minibatch_unit=transitions``: GAE (and every estimator) needs the rest of each step's
    trajectory, so they are computed once over whole trajectories before the first epoch, as Stable-Baselines3's
    PPO computes GAE once per rollout (with the acting values; here the learner's at the iteration's start, which
    are those when the learner is not behind, e.g. ``--serial_mode``).

    Args:
        data: ``[B, T(+1), ...]`` trajectories, as :func:`learning_step`'s ``mb`` (a model without a recurrent core).
        valids: ``[B, T]`` bool.
        config: the agent's :class:`~sfx.agents.appo.flags.APPOConfig` (or a parsed cfg).

    Returns:
        ``Targets(returns, advantages)``, ``[B, T]`` each; V-trace's ratios are the current policy's over the
        behaviour's.
    """
    params = _config(config).params
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


class APPOLearning(Agent):
    """One APPO learner's state beside the model (its optimizers, the running advantage statistics, V-MPO's duals,
    the KL-adaptive schedule) and its iteration: minibatches, then :func:`learning_step` on each.
    :class:`~sfx.agents.appo.agent.APPO` adds the declarations."""

    def __init__(self, cfg: Any, model: torch.nn.Module, device: torch.device, group: Any = None) -> None:
        super().__init__(cfg, model, device, group)
        self.config = APPOConfig.from_cfg(cfg)
        self.optimizer = self.optimizers.adam("optimizer", model.parameters(), "learning_rate", cfg, eps=cfg.adam_eps)
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
            self.vmpo_duals = (raw, self.optimizers.adam("vmpo_optimizer", [raw], "learning_rate", cfg,
                                                         eps=cfg.adam_eps))
        self._start_epochs(cfg.ppo_epochs)  # minibatches() sets each iteration's; steps taken without it: 1 each

    def sample_source(self, fresh: Any) -> Any:
        if not any(s.type != "queue" for s in self.replay):
            return fresh
        from sfx.agents.kit.replay_mix import ReplayMix

        return ReplayMix(fresh, self.replay, lambda: self.trajectories_per_iteration(self.cfg), self.device,
                         features=self.features if replay_needs_features(self.replay) else None, seed=self.cfg.seed)

    @torch.no_grad()
    def features(self, data: dict[str, Any]) -> torch.Tensor:
        """``[n, T, H]``: the current weights' core outputs over stored trajectories (custom replay buffers)."""
        n, T = data["rewards"].shape
        done = data["terminated"] | data["truncated"]
        tasks = data["task"] if self.model.popart is not None else None
        memory = data["memory"] if self.model.memory_len else None
        recurrence = self.config.recurrence
        out = self.model.forward_trajectories(data["obs"], data["rnn_states"], done,
                                              T if recurrence is None else recurrence, tasks, memory)
        return out.core_outputs[:, :T].reshape(n, T, -1)

    def minibatches(self, batch: Batch) -> Iterator[tuple[dict[str, Any], torch.Tensor]]:
        data = batch.data if bool(batch.fresh.all()) else {**batch.data, "replayed": ~batch.fresh}
        if self.config.minibatch_unit == "transitions":
            yield from self._transition_minibatches(batch, data)
            return
        n = batch.num_trajectories
        # every epoch's order is drawn before the first step (the random stream of the learner is the same
        # whatever the steps draw)
        per_mb = self.config.trajectories_per_minibatch
        orders = trajectory_minibatches(n, per_mb, self.config.ppo_epochs, self.device)
        self._start_epochs(len(orders))
        if per_mb >= n:
            # one minibatch is the whole batch (the default: 1 minibatch, 1 epoch): the loss sums over its
            # trajectories in any order, so the batch goes as it is, without a shuffled copy of every frame
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
        targets = iteration_targets(self.model, data, batch.valids, self.config)
        data = {**data, "target_returns": targets.returns, "target_advantages": targets.advantages}
        orders = transition_minibatches(n, T, self.config.batch_size, self.config.ppo_epochs, self.device)
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
            stats = learning_step(self.model, self.optimizer, mb, valids, self.config, self.group,
                                  self.advantage_stats, self.vmpo_duals)
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
        state: dict[str, Any] = self.optimizers.state_dict()  # "optimizer", with V-MPO "vmpo_optimizer"
        if self.advantage_stats is not None:
            state["advantage_stats"] = self.advantage_stats.state_dict()
        if self.vmpo_duals is not None:
            state["vmpo_duals"] = self.vmpo_duals[0].detach().clone()
        if self.cfg.lr_schedule in KL_ADAPTIVE_SCHEDULES:
            state["lr_scale"] = self.lr_scale  # the adapted rate (a linear decay's is recomputed from env steps)
        return state

    def load_learning_state(self, state: Mapping[str, Any]) -> None:
        # a checkpoint of another policy loss (or of before V-MPO existed), or of the other --vmpo_kl_bounds (one
        # multiplier, not two, or the reverse), starts eta and the multipliers at their flags
        duals_fit = (self.vmpo_duals is not None and "vmpo_duals" in state
                     and state["vmpo_duals"].shape == self.vmpo_duals[0].shape)
        self.optimizers.load_state_dict({k: v for k, v in state.items() if k != "vmpo_optimizer" or duals_fit})
        # a checkpoint written before the running advantage statistics existed (or with
        # --advantage_normalization=minibatch) starts them afresh: they settle within a few minibatches
        if self.advantage_stats is not None and "advantage_stats" in state:
            self.advantage_stats.load_state_dict(state["advantage_stats"])
        if duals_fit:
            with torch.no_grad():
                self.vmpo_duals[0].copy_(state["vmpo_duals"])
        if self.cfg.lr_schedule in KL_ADAPTIVE_SCHEDULES and "lr_scale" in state:
            self.set_lr_scale(float(state["lr_scale"]))

    def apply_params(self, params: Mapping[str, Any]) -> None:
        if params:  # new hyperparameters in cfg: the step's config follows them
            self.config = APPOConfig.from_cfg(self.cfg)
        super().apply_params(params)
