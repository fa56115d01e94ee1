"""Learner: one per policy, in its own process; the shell around the run's agent (:mod:`sfx.agents`).

It collects trajectory slot indices from its queue into its sample source
(:class:`~sfx.engine.sample_source.FreshTrajectories`, or the agent's replay store around it), and when
the source has an iteration's batch, hands it to the agent: ``minibatches``, one ``step`` each (the new
weights are published to the policy workers after each), ``end_iteration``. Around that it owns what
every algorithm shares: counters, checkpoints (the model's weights and the agent's ``learning_state``),
population-based training's snapshot / update messages, the ranks' gradient group, skipped non-finite
minibatches, and the ``TRAIN`` report.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from typing import Any

import torch

from sfx.agents import Agent, NonFiniteBatch, Stepped
from sfx.algo.schedules import lr_factor
from sfx.engine import perf
from sfx.engine.buffers import TrajectoryBuffers, WeightsBuffer
from sfx.engine.component import Component
from sfx.engine.sample_source import FreshTrajectories
from sfx.engine.protocol import (CHECKPOINT, CHECKPOINT_FAILED, LEARNER_READY, PBT_APPLIED, PBT_SNAPSHOT, PBT_UPDATE,
                                 RANKS_STOPPED, STOP_LEARNING, STOP_STATUSES, TRAIN, TRAJ)

log = logging.getLogger(__name__)

# with several ranks, the learners compare a checksum of their weights this often (iterations)
WEIGHTS_CHECK_ITERATIONS = 50


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


class Learner(Component):
    """A component (start / process / tick / finish). Messages in (:mod:`sfx.engine.protocol`): ``TRAJ``
    on its inbox; on its control queue, from population-based training, ``PBT_SNAPSHOT`` (save the whole
    state there) and ``PBT_UPDATE`` (load another policy's snapshot, then use new hyperparameters).
    Out: free slot indices to the policy's free queue; ``LEARNER_READY``, ``TRAIN``, ``CHECKPOINT``,
    ``CHECKPOINT_FAILED``, ``PBT_SNAPSHOT``, ``PBT_APPLIED`` reports."""

    waiting_for = "trajectories"

    def __init__(self, cfg: Any, policy_id: int, agent: type[Agent], model: torch.nn.Module,
                 traj_buffers: TrajectoryBuffers, weights: WeightsBuffer, free_slot_queue: Any,
                 report_queue: Any, device: torch.device, group: Any = None, ranks: Any = None,
                 gate: Any = None, inference: Any = None) -> None:
        # group: a GradientGroup when this policy's learners run on several ranks (sfx.engine.data_parallel);
        # ranks: this process's RankInfo (sfx.engine.ranks): with several ranks, start() joins the group;
        # gate: the rank's CollectionGate (--batches_ahead), told what this learner takes;
        # inference: --inference=learner's LearnerInference (sfx.engine.learner_inference): this policy's acting
        # runs here, and ``weights`` is its LocalWeights (the copy on the device, and shared memory if needed)
        self.group = group
        self.inference = inference
        self.ranks = ranks
        self.is_main = ranks is None or ranks.is_main
        # STOP_LEARNING received (how this rank wants to end, one of STOP_STATUSES): vote to stop at the next
        # iteration
        self.stop_requested: str | None = None
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
        # the agent shares this learner's cfg copy: PBT's new values reach its next step
        self.agent = agent(self.cfg, self.model, device, group)
        fresh = FreshTrajectories(traj_buffers, free_slot_queue, device, self.cfg.max_policy_lag,
                                  self.cfg.env_frameskip, lambda: self.agent.trajectories_per_iteration(self.cfg),
                                  gate=gate, policy=policy_id)
        self.source = self.agent.sample_source(fresh)
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
        self.agent.group = self.group
        ckpt = load_latest_checkpoint(self.cfg, self.policy_id, map_location=self.device) if self.is_main else None
        if ckpt is not None:
            from sfx.experiment.provenance import restore_rng_state

            self.model.load_state_dict(ckpt["model"])
            self.agent.load_learning_state(ckpt)
            restore_rng_state(ckpt.get("rng"))  # the random streams go on where the saved run left them
            self.train_step = int(ckpt["train_step"])
            self.env_steps = int(ckpt["env_steps"])
            log.info("policy %d resumed at train step %d, %d env steps",
                     self.policy_id, self.train_step, self.env_steps)
        # a resumed run may have changed --learning_rate: the optimizers take the cfg's values
        self.agent.apply_params({"learning_rate": self.cfg.learning_rate})
        self._apply_saved_policy_params()
        if self.group is not None:
            self.group.broadcast_state(self.model)
            self.agent.load_learning_state(self.group.broadcast_object(self.agent.learning_state()))
            self.train_step, self.env_steps = self.group.broadcast_object((self.train_step, self.env_steps))
            if not self.group.weights_match(self.model):
                raise RuntimeError("the ranks' weights differ right after the broadcast from rank 0")
        self._schedule_lr()
        self.weights.publish(self.model, self.train_step)
        if self.inference is not None:
            self.inference.start(threaded=not self.cfg.serial_mode)
        self.report_queue.put((LEARNER_READY, self.policy_id,
                               {"env_steps": self.env_steps, "train_step": self.train_step}))

    def state(self) -> dict:
        """A checkpoint: the model's weights, the agent's learning state (APPO: ``optimizer``,
        ``advantage_stats``), the counters and the cfg."""
        return {"model": self.model.state_dict(), **self.agent.learning_state(),
                "train_step": self.train_step, "env_steps": self.env_steps,
                "policy_version": self.train_step, "cfg": dict(vars(self.cfg))}

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
        self.agent.apply_params(params)

    def _apply_saved_policy_params(self) -> None:
        """On a resumed PBT run: this policy's hyperparameters as the population manager last set them."""
        from sfx.experiment import policy_cfg_path

        path = policy_cfg_path(self.cfg, self.policy_id)
        if self.cfg.with_pbt and path.is_file():
            params = json.loads(path.read_text()).get("params", {})
            self.apply_params(params)
            log.info("policy %d uses its saved PBT hyperparameters %s", self.policy_id, params)

    def _schedule_lr(self) -> None:
        """--lr_schedule=linear_decay's factor at the env steps trained so far (a resumed run's: the checkpoint's)."""
        if self.cfg.lr_schedule == "linear_decay":  # the KL-adaptive schedules are the agent's own
            self.agent.set_lr_scale(lr_factor(self.cfg.lr_schedule, self.env_steps, self.cfg.train_for_env_steps,
                                              self.cfg.lr_decay_multiplier))

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
            self.agent.load_learning_state(state)
            Path(load_path).unlink(missing_ok=True)
        self.apply_params(payload["params"])
        if load_path:
            self.weights.publish(self.model, self.train_step)
        self.report_queue.put((PBT_APPLIED, self.policy_id, {"params": dict(payload["params"]),
                                                               "from_policy": payload.get("from_policy")}))

    def tick(self) -> None:
        if self.inference is not None:
            # the thread beats like a policy worker: the same deadline
            self.inference.check(self.cfg.heartbeat_timeout_sec)
            if self.cfg.serial_mode:
                self.inference.poll()
        self.maybe_save()

    def finish(self) -> None:
        """The final checkpoint (after a stop, or after a crash: the last good weights)."""
        if self.inference is not None:
            self.inference.stop()
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
                self.source.add(payload)
            elif kind == PBT_SNAPSHOT:
                self._pbt_snapshot(payload)
            elif kind == PBT_UPDATE:
                self._pbt_update(payload)
            elif kind == STOP_LEARNING:
                if payload not in STOP_STATUSES:
                    raise ValueError(f"learner got STOP_LEARNING with status {payload!r}; expected one of "
                                     f"{STOP_STATUSES}")
                self.stop_requested = payload
            else:
                raise ValueError(f"learner got unknown message {kind!r}")
        # ready() is asked right after each iteration: a fresh source then tells the collection gate whether the
        # next batch is already whole (this learner sets the pace; sfx.engine.buffers.CollectionGate)
        while self.source.ready() and not self.ranks_stopped:
            if self.group is not None and self._ranks_vote_stop():
                return
            self.train_iteration()

    def _ranks_vote_stop(self) -> bool:
        """With several ranks, before each iteration: does any rank's coordinator want to stop? Every
        learner then stops at this same point (so no collective waits for a learner that left), checks
        that the weights are still equal, and says so (``RANKS_STOPPED``); it trains no more and waits for
        its coordinator's stop (then ``finish`` saves rank 0's final checkpoint). The vote keeps the most
        urgent status any rank wanted (``STOP_STATUSES``), which every rank ends with."""
        wanted = STOP_STATUSES.index(self.stop_requested) + 1 if self.stop_requested is not None else 0
        agreed = self.group.max(wanted)
        if agreed:
            match = self.group.weights_match(self.model)
            self.report_queue.put((RANKS_STOPPED, self.policy_id, {"env_steps": self.env_steps,
                                                                    "weights_match": match,
                                                                    "status": STOP_STATUSES[agreed - 1]}))
            self.ranks_stopped = True
        return bool(agreed)

    def train_iteration(self) -> None:
        """One iteration: the source's next batch, the agent's minibatch steps (new weights published after
        each but the last), ``end_iteration``, the last publish, the ``TRAIN`` report."""
        t_start = time.time()
        batch = self.source.next_batch(self.train_step)
        n, T = batch.valids.shape
        steps = batch.env_steps
        self._schedule_lr()  # at the steps trained before this batch: the first iteration trains at the flag's rate
        # with several ranks every learner counts every rank's env steps (checkpoints hold the total)
        self.env_steps += steps if self.group is None else int(self.group.sum(torch.tensor([float(steps)]))[0])
        self.iterations += 1
        if self.group is not None and self.iterations % WEIGHTS_CHECK_ITERATIONS == 0 \
                and not self.group.weights_match(self.model):
            raise RuntimeError(f"policy {self.policy_id}: the ranks' weights differ at train step {self.train_step} "
                               f"(checked every {WEIGHTS_CHECK_ITERATIONS} iterations); stopping")

        stats_acc: dict[str, float] = {}
        num_steps = 0
        minibatches = iter(self.agent.minibatches(batch))
        mb = next(minibatches, None)
        while mb is not None:
            following = next(minibatches, None)
            # the last step's weights are published after end_iteration (with the new input statistics)
            stats = self._train_minibatch(*mb, publish=following is not None)
            mb = following
            if stats is None:
                continue  # skipped: not finite
            for k, v in stats.items():
                stats_acc[k] = stats_acc.get(k, 0.0) + v
            num_steps += 1
        self.agent.end_iteration(batch)
        with perf.section("publish"):
            self.weights.publish(self.model, self.train_step)
        stats = {k: v / num_steps for k, v in stats_acc.items()} if num_steps else {}
        fresh_age = batch.age[batch.fresh]
        stats.update({
            "nan_batches": self.nan_batches,
            "env_steps": self.env_steps, "train_step": self.train_step, "samples": n * T,
            "valid_fraction": float(batch.valids.float().mean()),
            "inactive_fraction": float((~batch.data["active"]).float().mean()),
            "lr": self.agent.current_lr(),
            "train_sec": time.time() - t_start,
        })
        stats.update(batch.stats)
        if fresh_age.numel():
            stats.update({"policy_lag_avg": float(fresh_age.mean()), "policy_lag_max": float(fresh_age.max())})
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

    def _train_minibatch(self, mb: dict[str, torch.Tensor], valids: torch.Tensor,
                         publish: bool = True) -> dict[str, float] | None:
        """The agent's ``step``, then (with ``publish``) publish the new weights; ``None`` when the
        minibatch was skipped."""
        try:
            with perf.section("step"):
                stats = self.agent.step(mb, valids)
        except NonFiniteBatch as e:
            self._skip_not_finite(mb, e.where)
            return None
        if isinstance(stats, Stepped):  # new priorities of the trained samples: back to the source that drew them
            self.source.update_priorities(stats.ids, stats.priorities)
            stats = stats.stats
        self.consecutive_nan_batches = 0
        self.train_step += 1
        if publish:
            with perf.section("publish"):
                self.weights.publish(self.model, self.train_step)
        return stats
