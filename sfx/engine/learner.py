"""Learner: one per policy, in its own process.

It collects trajectory slot indices from its queue, copies a whole iteration's worth of
trajectories out of shared memory (and frees those slots at once, so rollouts never wait for the
optimizer), then runs ``ppo_epochs`` passes of minibatch SGD with V-trace (or GAE) targets and the
clipped PPO loss. After every optimizer step it publishes the new weights to the policy workers.

One minibatch step is ``learning_step``: the model recomputes the trajectories
(``ActorCritic.forward_trajectories``), ``sfx.algo.appo`` gives the targets and the named loss
terms, and the step sums ``coefficient * term``, steps the optimizer and returns its statistics.
It runs without any process or queue (tests, ``bench/learner_step.py``).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import time
from typing import Any

import torch

from sfx.algo.appo import LOSS_TERMS, APPOParams, appo_loss_terms, appo_targets, normalize_advantages
from sfx.algo.distributions import make_action_distribution
from sfx.algo.normalizers import RunningMeanStd
from sfx.engine.buffers import TrajectoryBuffers, WeightsBuffer, tree_map
from sfx.engine.component import Component
from sfx.engine.protocol import (CHECKPOINT, CHECKPOINT_FAILED, LEARNER_READY, PBT_APPLIED, PBT_SNAPSHOT, PBT_UPDATE,
                                 RANKS_STOPPED, STOP_LEARNING, TRAIN, TRAJ)

log = logging.getLogger(__name__)

# with several ranks, the learners compare a checksum of their weights this often (iterations)
WEIGHTS_CHECK_ITERATIONS = 50


def trajectories_per_minibatch(cfg: Any) -> int:
    return cfg.batch_size // cfg.rollout


def trajectories_per_iteration(cfg: Any) -> int:
    return trajectories_per_minibatch(cfg) * cfg.num_batches_per_iteration


def batch_summary(mb: dict) -> str:
    """min / max / share of non-finite values of each float tensor of a minibatch, for the log."""
    parts = []
    for key, value in sorted(mb.items()):
        for name, t in (value.items() if isinstance(value, dict) else [(key, value)]):
            if not torch.is_tensor(t) or not t.is_floating_point() or t.numel() == 0:
                continue
            t = t.detach().float()
            finite = torch.isfinite(t)
            bad = 1.0 - float(finite.float().mean())
            lo = float(t[finite].min()) if bool(finite.any()) else float("nan")
            hi = float(t[finite].max()) if bool(finite.any()) else float("nan")
            parts.append(f"{name}[min {lo:.4g}, max {hi:.4g}" + (f", {bad:.1%} non-finite]" if bad else "]"))
    return "; ".join(parts)


class NonFiniteBatch(Exception):
    """A minibatch whose ``where`` (value targets / advantages, loss or gradients) is not finite:
    ``learning_step`` applied nothing from it (the returns normalizer may have seen its targets)."""

    def __init__(self, where: str) -> None:
        super().__init__(f"{where} not finite")
        self.where = where


def make_optimizer(cfg: Any, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The learner's optimizer: Adam with ``--learning_rate``, ``--adam_beta1/2``, ``--adam_eps``."""
    return torch.optim.Adam(model.parameters(), lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
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


def learning_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, mb: dict[str, Any],
                  valids: torch.Tensor, cfg: Any, group: Any = None,
                  advantage_stats: RunningMeanStd | None = None) -> dict[str, float]:
    """One APPO minibatch step on ``model`` (an ``ActorCritic``): forward, targets, loss, backward,
    gradient clipping and ``optimizer.step()``. Needs no process or queue.

    Args:
        mb: a minibatch shaped like ``TrajectoryBuffers.tensors()`` with ``B`` trajectories:
            ``obs {key: [B, T+1, ...]}``, ``rnn_states [B, T+1, S]``, ``actions``, ``log_probs``,
            ``action_params``, ``values``, ``rewards``, ``terminated``, ``truncated``, ``trunc_values``,
            ``active`` (``[B, T]`` bool: the agent's own steps; the others are transparent in the targets).
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

    values = out.values.detach()
    log_rhos = log_prob.detach() - mb["log_probs"] if params.with_vtrace else None
    reduce = group.sum if group is not None else None
    # PopArt: each task's policy gradient on the scale of its normalised targets (advantage / its sigma)
    adv_scale = popart.sigma(tasks).reciprocal() if popart is not None else None
    # the agent's inactive steps are transparent in the targets (their values are never trained); `valids`
    # also drops lagging samples, which are still steps of the agent
    targets = appo_targets(mb["rewards"], mb["terminated"], mb["truncated"], mb["trunc_values"], values,
                           out.bootstrap_values, log_rhos, valids, params, reduce, adv_scale, active=mb["active"],
                           normalize=advantage_stats is None)
    bad = not (bool(torch.isfinite(targets.returns).all()) and bool(torch.isfinite(targets.advantages).all()))
    # with ranks every rank joins the vote, bad or not: a rank that skipped it would pair its next
    # collective with the others' vote
    if group.any(bad) if group is not None else bad:
        raise NonFiniteBatch("value targets / advantages")
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

    terms = appo_loss_terms(dist, old_dist, log_prob, mb["log_probs"], targets, returns_norm, out.values,
                            out.values_normalized, old_values_norm, valids, params)
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

    bad = not bool(torch.isfinite(loss))
    if group.any(bad) if group is not None else bad:
        raise NonFiniteBatch("loss")
    optimizer.zero_grad(set_to_none=True)
    if group is None:
        loss.backward()
    else:
        # this rank's share of all ranks' valid samples: summed gradients = gradient of the global mean
        local = valids.sum().to(torch.float64)
        share = local / group.sum(local.reshape(1))[0].clamp(min=1.0)
        (loss * share.to(loss.dtype)).backward()
        group.sum_gradients(model.parameters())
    # --max_grad_norm <= 0: no clipping (an infinite bound still measures the norm)
    max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if not bool(torch.isfinite(grad_norm)):
        optimizer.zero_grad(set_to_none=True)
        raise NonFiniteBatch("gradients")
    optimizer.step()
    popart_stats = {}
    if popart is not None:
        # after the step (van Hasselt et al. 2016): the tasks' statistics move towards this minibatch's
        # targets, and the value head is rescaled so its unnormalised outputs stay what they were
        popart.update(targets.returns, tasks, valids, model.value_head, reduce=reduce)
        popart_stats = popart_summary(popart, targets.returns, tasks, valids)

    names = {"exploration": f"loss/{cfg.exploration_loss}"}
    stats = {"loss/total": loss.item()}
    stats.update({names.get(name, f"loss/{name}"): getattr(terms, name).item() for name in LOSS_TERMS})
    stats.update({f"loss/{name}": term.item() for name, term in aux_terms.items()})
    stats.update(popart_stats)
    stats.update({
        "entropy": terms.entropy.item(), "kl": terms.kl.item(), "grad_norm": grad_norm.item(),
        "ratio_mean": terms.ratio_mean.item(), "adv_std": terms.adv_std.item(),
        "value_mean": terms.value_mean.item(), "target_mean": terms.target_mean.item(),
    })
    return stats


class Learner(Component):
    """A component (start / process / tick / finish). Messages in (:mod:`sfx.engine.protocol`): ``TRAJ``
    on its inbox; on its control queue, from population-based training, ``PBT_SNAPSHOT`` (save the whole
    state there) and ``PBT_UPDATE`` (load another policy's snapshot, then use new hyperparameters).
    Out: free slot indices to the policy's free queue; ``LEARNER_READY``, ``TRAIN``, ``CHECKPOINT``,
    ``CHECKPOINT_FAILED``, ``PBT_SNAPSHOT``, ``PBT_APPLIED`` reports."""

    def __init__(self, cfg: Any, policy_id: int, model: torch.nn.Module,
                 traj_buffers: TrajectoryBuffers, weights: WeightsBuffer, free_slot_queue: Any,
                 report_queue: Any, device: torch.device, group: Any = None, ranks: Any = None) -> None:
        # group: a GradientGroup when this policy's learners run on several ranks (sfx.engine.data_parallel);
        # ranks: this process's RankInfo (sfx.engine.ranks): with several ranks, start() joins the group
        self.group = group
        self.ranks = ranks
        self.is_main = ranks is None or ranks.is_main
        self.stop_requested = False  # STOP_LEARNING received: vote to stop at the next iteration
        self.ranks_stopped = False  # the ranks voted to stop: no more training (the coordinator stops us)
        self.iterations = 0
        # a copy: PBT changes this policy's hyperparameters, and in serial mode the learners of all
        # policies would otherwise share one cfg object
        self.cfg = copy.copy(cfg)
        self.policy_id = policy_id
        self.device = device
        self.model = model.to(device).train()
        self.traj = traj_buffers
        self.weights = weights
        self.free_slots = free_slot_queue
        self.report_queue = report_queue
        self.optimizer = make_optimizer(cfg, self.model)
        # learning state beside the optimizer's: checkpointed, copied by PBT, broadcast to ranks
        self.advantage_stats = (RunningMeanStd((), clip=None).to(device)
                                if running_advantage_normalization(cfg) else None)
        self.pending: list[int] = []
        self.nan_batches = 0  # minibatches skipped for NaN/inf, over this process's life
        self.consecutive_nan_batches = 0
        self.train_step = 0
        self.env_steps = 0
        self.last_save = time.time()
        self.last_milestone = time.time()

    # ---------------------------------------------------------------- state

    def start(self) -> None:
        """Resume from the newest readable checkpoint, publish weights, announce readiness. With several
        ranks: join the learners' group; rank 0's weights, optimizer state and counters go to every rank."""
        from sfx.experiment import load_latest_checkpoint

        if self.group is None and self.ranks is not None and self.ranks.is_distributed:
            from sfx.engine.data_parallel import join_group

            self.group = join_group(self.ranks, self.device, self.cfg.distributed_timeout_sec)
        ckpt = load_latest_checkpoint(self.cfg, self.policy_id, map_location=self.device) if self.is_main else None
        if ckpt is not None:
            self.model.load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(ckpt["optimizer"])
            self._load_advantage_stats(ckpt)
            self.train_step = int(ckpt["train_step"])
            self.env_steps = int(ckpt["env_steps"])
            log.info("policy %d resumed at train step %d, %d env steps",
                     self.policy_id, self.train_step, self.env_steps)
        for group in self.optimizer.param_groups:  # a resumed run may have changed --learning_rate
            group["lr"] = self.cfg.learning_rate
        self._apply_saved_policy_params()
        if self.group is not None:
            self.group.broadcast_state(self.model)
            self.optimizer.load_state_dict(self.group.broadcast_object(self.optimizer.state_dict()))
            if self.advantage_stats is not None:
                self.advantage_stats.load_state_dict(self.group.broadcast_object(self.advantage_stats.state_dict()))
            self.train_step, self.env_steps = self.group.broadcast_object((self.train_step, self.env_steps))
            if not self.group.weights_match(self.model):
                raise RuntimeError("the ranks' weights differ right after the broadcast from rank 0")
        self.weights.publish(self.model, self.train_step)
        self.report_queue.put((LEARNER_READY, self.policy_id,
                               {"env_steps": self.env_steps, "train_step": self.train_step}))

    def state(self) -> dict:
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "train_step": self.train_step, "env_steps": self.env_steps,
                 "policy_version": self.train_step, "cfg": dict(vars(self.cfg))}
        if self.advantage_stats is not None:
            state["advantage_stats"] = self.advantage_stats.state_dict()
        return state

    def _load_advantage_stats(self, state: dict) -> None:
        """The running advantage statistics of a checkpoint; one written before they existed (or with
        --advantage_normalization=minibatch) starts them afresh: they settle within a few minibatches."""
        if self.advantage_stats is not None and "advantage_stats" in state:
            self.advantage_stats.load_state_dict(state["advantage_stats"])

    def save_checkpoint(self) -> None:
        if not self.is_main:
            return  # with several ranks, rank 0 owns the checkpoints (every rank holds the same weights)
        from sfx.experiment import save_checkpoint, save_milestone

        from sfx.experiment import checkpoint_dir, list_checkpoints

        try:
            path = save_checkpoint(self.cfg, self.policy_id, self.state())
        except OSError as e:
            # disk full, quota, a vanished mount: the write went to a temp file that is gone now, so
            # the previous checkpoint is untouched; training goes on and the next period tries again
            self.last_save = time.time()
            kept = list_checkpoints(checkpoint_dir(self.cfg, self.policy_id))
            log.error("policy %d: checkpoint at train step %d could not be saved: %s. The previous checkpoint is "
                      "intact (%s); the next save is in %.0f s", self.policy_id, self.train_step,
                      e.strerror or e, kept[0] if kept else "none yet", self.cfg.save_every_sec)
            self.report_queue.put((CHECKPOINT_FAILED, self.policy_id, {"error": str(e)}))
            return
        self.last_save = time.time()
        if self.cfg.save_milestones_sec > 0 and time.time() - self.last_milestone >= self.cfg.save_milestones_sec:
            try:
                save_milestone(self.cfg, self.policy_id, path)
            except OSError as e:
                log.error("policy %d: milestone copy of %s failed: %s", self.policy_id, path, e.strerror or e)
            self.last_milestone = time.time()
        self.report_queue.put((CHECKPOINT, self.policy_id, {"path": str(path), "env_steps": self.env_steps,
                                                              "train_step": self.train_step}))

    # ---------------------------------------------------------------- population-based training

    def apply_params(self, params: dict) -> None:
        """Use new hyperparameters from now on (the next minibatch already sees them)."""
        for name, value in params.items():
            setattr(self.cfg, name, value)
        if "learning_rate" in params:
            for group in self.optimizer.param_groups:
                group["lr"] = float(params["learning_rate"])

    def _apply_saved_policy_params(self) -> None:
        """On a resumed PBT run: this policy's hyperparameters as the population manager last set them."""
        from sfx.experiment import policy_cfg_path

        path = policy_cfg_path(self.cfg, self.policy_id)
        if self.cfg.with_pbt and path.is_file():
            params = json.loads(path.read_text()).get("params", {})
            self.apply_params(params)
            log.info("policy %d uses its saved PBT hyperparameters %s", self.policy_id, params)

    def _pbt_snapshot(self, payload: dict) -> None:
        from pathlib import Path

        from sfx.experiment import atomic_torch_save

        path = Path(payload["path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_torch_save(self.state(), path)
        self.report_queue.put((PBT_SNAPSHOT, self.policy_id, {"request": payload["request"], "path": str(path)}))

    def _pbt_update(self, payload: dict) -> None:
        from pathlib import Path

        from sfx.experiment import load_checkpoint

        load_path = payload.get("load_path")
        if load_path:
            # the other policy's weights and optimizer state; this policy's own counters go on
            state = load_checkpoint(load_path, map_location=self.device)
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self._load_advantage_stats(state)
            Path(load_path).unlink(missing_ok=True)
        self.apply_params(payload["params"])
        if load_path:
            self.weights.publish(self.model, self.train_step)
        self.report_queue.put((PBT_APPLIED, self.policy_id, {"params": dict(payload["params"]),
                                                               "from_policy": payload.get("from_policy")}))

    def tick(self) -> None:
        self.maybe_save()

    def finish(self) -> None:
        """The final checkpoint (after a stop, or after a crash: the last good weights)."""
        self.save_checkpoint()
        if self.group is not None:
            self.group.close()

    def maybe_save(self) -> None:
        if time.time() - self.last_save >= self.cfg.save_every_sec:
            self.save_checkpoint()

    # ---------------------------------------------------------------- training

    def process(self, msgs: list) -> None:
        for kind, payload in msgs:
            if kind == TRAJ:
                self.pending.extend(payload)
            elif kind == PBT_SNAPSHOT:
                self._pbt_snapshot(payload)
            elif kind == PBT_UPDATE:
                self._pbt_update(payload)
            elif kind == STOP_LEARNING:
                self.stop_requested = True
            else:
                raise ValueError(f"learner got unknown message {kind!r}")
        per_iter = trajectories_per_iteration(self.cfg)
        while len(self.pending) >= per_iter and not self.ranks_stopped:
            batch_slots, self.pending = self.pending[:per_iter], self.pending[per_iter:]
            if self.group is not None and self._ranks_vote_stop():
                return
            self.train_iteration(batch_slots)

    def _ranks_vote_stop(self) -> bool:
        """With several ranks, before each iteration: does any rank's coordinator want to stop? Every
        learner then stops at this same point (so no collective waits for a learner that left), checks
        that the weights are still equal, and says so (``RANKS_STOPPED``); it trains no more and waits for
        its coordinator's stop (then ``finish`` saves rank 0's final checkpoint)."""
        stop = self.group.any(self.stop_requested)
        if stop:
            match = self.group.weights_match(self.model)
            self.report_queue.put((RANKS_STOPPED, self.policy_id, {"env_steps": self.env_steps,
                                                                    "weights_match": match}))
            self.ranks_stopped = True
        return stop

    def _gather(self, slots: list[int]) -> dict[str, torch.Tensor]:
        idx = torch.as_tensor(slots, dtype=torch.long)
        batch = tree_map(lambda v: v.index_select(0, idx).to(self.device), self.traj.tensors())
        self.free_slots.put_many(list(slots))
        return batch

    def train_iteration(self, slots: list[int]) -> None:
        cfg = self.cfg
        t_start = time.time()
        batch = self._gather(slots)
        n, T = batch["rewards"].shape
        steps = n * T * cfg.env_frameskip
        # with several ranks every learner counts every rank's env steps (checkpoints hold the total)
        self.env_steps += steps if self.group is None else int(self.group.sum(torch.tensor([float(steps)]))[0])
        self.iterations += 1
        if self.group is not None and self.iterations % WEIGHTS_CHECK_ITERATIONS == 0 \
                and not self.group.weights_match(self.model):
            raise RuntimeError(f"policy {self.policy_id}: the ranks' weights differ at train step {self.train_step} "
                               f"(checked every {WEIGHTS_CHECK_ITERATIONS} iterations); stopping")

        lag = (self.train_step - batch["policy_versions"]).float()
        valids = (lag <= cfg.max_policy_lag) & batch["active"]
        per_mb = trajectories_per_minibatch(cfg)
        minibatches = [perm[start:start + per_mb] for perm in (torch.randperm(n, device=self.device)
                                                               for _ in range(cfg.ppo_epochs))
                       for start in range(0, n, per_mb)]
        stats_acc: dict[str, float] = {}
        num_steps = 0
        for i, mb in enumerate(minibatches):
            stats = self._train_minibatch(tree_map(lambda v: v[mb], batch), valids[mb],
                                          publish=i < len(minibatches) - 1)
            if stats is None:
                continue  # skipped: not finite
            for k, v in stats.items():
                stats_acc[k] = stats_acc.get(k, 0.0) + v
            num_steps += 1
        # The input statistics take this batch in only now, after its last optimizer step and before
        # that step's weights are published: every sample is evaluated with the statistics it was
        # acted with (samples of lag 0 recompute their behaviour log-probs exactly), and the policy
        # workers get the new statistics together with the weights that are trained on them next.
        self._update_obs_normalizer(batch["obs"], T, valids)
        self.weights.publish(self.model, self.train_step)
        stats = {k: v / num_steps for k, v in stats_acc.items()} if num_steps else {}
        stats.update({
            "nan_batches": self.nan_batches,
            "env_steps": self.env_steps, "train_step": self.train_step, "samples": n * T,
            "policy_lag_avg": float(lag.mean()), "policy_lag_max": float(lag.max()),
            "valid_fraction": float(valids.float().mean()),
            "inactive_fraction": float((~batch["active"]).float().mean()),
            "lr": self.optimizer.param_groups[0]["lr"],
            "train_sec": time.time() - t_start,
        })
        self.report_queue.put((TRAIN, self.policy_id, stats))

    def _skip_not_finite(self, mb: dict, where: str) -> None:
        """A minibatch with NaN/inf in ``where`` is not applied; too many in a row stop the run."""
        self.nan_batches += 1
        self.consecutive_nan_batches += 1
        summary = batch_summary(mb)
        log.warning("policy %d: %s not finite in a minibatch (train step %d): skipped (%d so far, %d in a row). "
                    "Batch: %s", self.policy_id, where, self.train_step, self.nan_batches,
                    self.consecutive_nan_batches, summary)
        limit = self.cfg.max_nan_batches
        if self.consecutive_nan_batches >= limit:
            raise FloatingPointError(
                f"policy {self.policy_id}: {self.consecutive_nan_batches} minibatches in a row had non-finite "
                f"{where} (--max_nan_batches={limit}); stopping with the last good weights saved. "
                f"Last batch: {summary}")

    def _update_obs_normalizer(self, obs: dict[str, torch.Tensor], T: int, valids: torch.Tensor) -> None:
        """Fold the valid steps' observations (``[n, T + 1, ...]`` per key) into the input statistics."""
        if not (self.cfg.normalize_input and self.model.has_obs_normalizer) \
                or (self.group is None and not bool(valids.any())):
            return
        rows = {k: v[:, :T][valids] for k, v in obs.items()}
        # one non-finite observation would poison the running statistics for good (with ranks: on every
        # rank, and every rank takes part in the update or none does)
        bad = not all(bool(torch.isfinite(v).all()) for v in rows.values() if v.is_floating_point())
        if self.group is not None:
            if not self.group.any(bad):
                self.model.update_obs_normalizer(rows, reduce=self.group.sum)
        elif not bad:
            self.model.update_obs_normalizer(rows)

    def _train_minibatch(self, mb: dict[str, torch.Tensor], valids: torch.Tensor,
                         publish: bool = True) -> dict[str, float] | None:
        """``learning_step``, then (with ``publish``) publish the new weights; ``None`` when the
        minibatch was skipped."""
        try:
            stats = learning_step(self.model, self.optimizer, mb, valids, self.cfg, self.group, self.advantage_stats)
        except NonFiniteBatch as e:
            self._skip_not_finite(mb, e.where)
            return None
        self.consecutive_nan_batches = 0
        self.train_step += 1
        if publish:
            self.weights.publish(self.model, self.train_step)
        return stats
