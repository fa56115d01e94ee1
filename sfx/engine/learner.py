"""Learner: one per policy, in its own process.

It collects trajectory slot indices from its queue, copies a whole iteration's worth of
trajectories out of shared memory (and frees those slots at once, so rollouts never wait for the
optimizer), then runs ``ppo_epochs`` passes of minibatch SGD with V-trace (or GAE) targets and the
clipped PPO loss. After every optimizer step it publishes the new weights to the policy workers.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from typing import Any

import torch

from sfx.algo.distributions import make_action_distribution
from sfx.algo.gae import gae
from sfx.algo.ppo import entropy_loss, kl_loss, masked_mean, ppo_policy_loss, ppo_value_loss, symmetric_kl_loss
from sfx.algo.vtrace import vtrace
from sfx.engine.buffers import TrajectoryBuffers, WeightsBuffer, tree_map

log = logging.getLogger(__name__)


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


class Learner:
    """Messages in: ``('traj', [slots])``; from population-based training
    ``('pbt_snapshot', {'request', 'path'})`` (save the whole state there) and
    ``('pbt_update', {'params', 'load_path', 'from_policy'})`` (load another policy's snapshot,
    then use new hyperparameters). Out: free slot indices to the policy's free queue,
    ``('learner_ready' | 'train' | 'checkpoint' | 'pbt_snapshot' | 'pbt_applied', policy_id, dict)``
    to the report queue."""

    def __init__(self, cfg: Any, policy_id: int, model: torch.nn.Module,
                 traj_buffers: TrajectoryBuffers, weights: WeightsBuffer, free_slot_queue: Any,
                 report_queue: Any, device: torch.device) -> None:
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
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.learning_rate,
                                          betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps)
        self.pending: list[int] = []
        self.nan_batches = 0  # minibatches skipped for NaN/inf, over this process's life
        self.consecutive_nan_batches = 0
        self.train_step = 0
        self.env_steps = 0
        self.last_save = time.time()
        self.last_milestone = time.time()

    # ---------------------------------------------------------------- state

    def start(self) -> None:
        """Resume from the newest readable checkpoint, publish weights, announce readiness."""
        from sfx.experiment import load_latest_checkpoint

        ckpt = load_latest_checkpoint(self.cfg, self.policy_id, map_location=self.device)
        if ckpt is not None:
            self.model.load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(ckpt["optimizer"])
            self.train_step = int(ckpt["train_step"])
            self.env_steps = int(ckpt["env_steps"])
            log.info("policy %d resumed at train step %d, %d env steps",
                     self.policy_id, self.train_step, self.env_steps)
        for group in self.optimizer.param_groups:  # a resumed run may have changed --learning_rate
            group["lr"] = self.cfg.learning_rate
        self._apply_saved_policy_params()
        self.weights.publish(self.model, self.train_step)
        self.report_queue.put(("learner_ready", self.policy_id,
                               {"env_steps": self.env_steps, "train_step": self.train_step}))

    def state(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "train_step": self.train_step, "env_steps": self.env_steps,
                "policy_version": self.train_step, "cfg": dict(vars(self.cfg))}

    def save_checkpoint(self) -> None:
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
            self.report_queue.put(("checkpoint_failed", self.policy_id, {"error": str(e)}))
            return
        self.last_save = time.time()
        if self.cfg.save_milestones_sec > 0 and time.time() - self.last_milestone >= self.cfg.save_milestones_sec:
            try:
                save_milestone(self.cfg, self.policy_id, path)
            except OSError as e:
                log.error("policy %d: milestone copy of %s failed: %s", self.policy_id, path, e.strerror or e)
            self.last_milestone = time.time()
        self.report_queue.put(("checkpoint", self.policy_id, {"path": str(path), "env_steps": self.env_steps,
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
        if getattr(self.cfg, "with_pbt", False) and path.is_file():
            params = json.loads(path.read_text()).get("params", {})
            self.apply_params(params)
            log.info("policy %d uses its saved PBT hyperparameters %s", self.policy_id, params)

    def _pbt_snapshot(self, payload: dict) -> None:
        from pathlib import Path

        from sfx.experiment import atomic_torch_save

        path = Path(payload["path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_torch_save(self.state(), path)
        self.report_queue.put(("pbt_snapshot", self.policy_id, {"request": payload["request"], "path": str(path)}))

    def _pbt_update(self, payload: dict) -> None:
        from pathlib import Path

        from sfx.experiment import load_checkpoint

        load_path = payload.get("load_path")
        if load_path:
            # the other policy's weights and optimizer state; this policy's own counters go on
            state = load_checkpoint(load_path, map_location=self.device)
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            Path(load_path).unlink(missing_ok=True)
        self.apply_params(payload["params"])
        if load_path:
            self.weights.publish(self.model, self.train_step)
        self.report_queue.put(("pbt_applied", self.policy_id, {"params": dict(payload["params"]),
                                                               "from_policy": payload.get("from_policy")}))

    def maybe_save(self) -> None:
        if time.time() - self.last_save >= self.cfg.save_every_sec:
            self.save_checkpoint()

    # ---------------------------------------------------------------- training

    def process(self, msgs: list) -> None:
        for kind, payload in msgs:
            if kind == "traj":
                self.pending.extend(payload)
            elif kind == "pbt_snapshot":
                self._pbt_snapshot(payload)
            elif kind == "pbt_update":
                self._pbt_update(payload)
            else:
                raise ValueError(f"learner got unknown message {kind!r}")
        per_iter = trajectories_per_iteration(self.cfg)
        while len(self.pending) >= per_iter:
            batch_slots, self.pending = self.pending[:per_iter], self.pending[per_iter:]
            self.train_iteration(batch_slots)

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
        self.env_steps += n * T * cfg.env_frameskip

        lag = (self.train_step - batch["policy_versions"]).float()
        valids = (lag <= cfg.max_policy_lag) & batch["active"]
        if cfg.normalize_input and self.model.has_obs_normalizer and bool(valids.any()):
            rows = {k: v[:, :T][valids] for k, v in batch["obs"].items()}
            # one non-finite observation would poison the running statistics for good
            if all(bool(torch.isfinite(v).all()) for v in rows.values() if v.is_floating_point()):
                self.model.update_obs_normalizer(rows)

        per_mb = trajectories_per_minibatch(cfg)
        stats_acc: dict[str, float] = {}
        num_steps = 0
        for _ in range(cfg.ppo_epochs):
            perm = torch.randperm(n, device=self.device)
            for start in range(0, n, per_mb):
                mb = perm[start:start + per_mb]
                stats = self._train_minibatch(tree_map(lambda v: v[mb], batch), valids[mb])
                if stats is None:
                    continue  # skipped: not finite
                for k, v in stats.items():
                    stats_acc[k] = stats_acc.get(k, 0.0) + v
                num_steps += 1
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
        self.report_queue.put(("train", self.policy_id, stats))

    def _skip_not_finite(self, mb: dict, where: str) -> None:
        """A minibatch with NaN/inf in ``where`` is not applied; too many in a row stop the run."""
        self.nan_batches += 1
        self.consecutive_nan_batches += 1
        summary = batch_summary(mb)
        log.warning("policy %d: %s not finite in a minibatch (train step %d): skipped (%d so far, %d in a row). "
                    "Batch: %s", self.policy_id, where, self.train_step, self.nan_batches,
                    self.consecutive_nan_batches, summary)
        limit = getattr(self.cfg, "max_nan_batches", 20)
        if self.consecutive_nan_batches >= limit:
            raise FloatingPointError(
                f"policy {self.policy_id}: {self.consecutive_nan_batches} minibatches in a row had non-finite "
                f"{where} (--max_nan_batches={limit}); stopping with the last good weights saved. "
                f"Last batch: {summary}")

    def _train_minibatch(self, mb: dict[str, torch.Tensor], valids: torch.Tensor) -> dict[str, float] | None:
        cfg, model = self.cfg, self.model
        n, T = mb["rewards"].shape
        R = cfg.recurrence if cfg.use_rnn else T
        obs = mb["obs"]
        done = mb["terminated"] | mb["truncated"]

        # Recompute the whole batch with current weights, `recurrence` steps at a time, starting
        # each chunk from the recurrent state the behaviour policy had there.
        seq_obs = {k: v[:, :T].reshape(n * T // R, R, *v.shape[2:]) for k, v in obs.items()}
        seq_init = mb["rnn_states"][:, 0:T:R].reshape(n * T // R, -1)
        prev_done = torch.cat([torch.zeros_like(done[:, :1]), done[:, :-1]], dim=1)
        seq_resets = prev_done.reshape(n * T // R, R)
        out = model.forward_sequence(seq_obs, seq_init, seq_resets)
        params = out["action_params"].reshape(n * T, -1)
        values_norm = out["values_normalized"].reshape(n, T)
        values = out["values"].reshape(n, T)
        with torch.no_grad():
            bootstrap = model.forward_step({k: v[:, T] for k, v in obs.items()}, mb["rnn_states"][:, T])["values"]

        space = model.action_space
        dist = make_action_distribution(space, params)
        actions = mb["actions"].reshape(n * T, -1)
        log_prob = dist.log_prob(actions).reshape(n, T)
        old_dist = make_action_distribution(space, mb["action_params"].reshape(n * T, -1))

        # time-major [T, n] for the target recursions
        def tm(x: torch.Tensor) -> torch.Tensor:
            return x.transpose(0, 1)

        rewards = (mb["rewards"] * cfg.reward_scale).clamp(-cfg.reward_clip, cfg.reward_clip)
        # a time limit is not the end of the task: bootstrap from V(final obs) on truncation
        rewards = rewards + cfg.gamma * mb["truncated"].float() * mb["trunc_values"]
        discounts = cfg.gamma * (1.0 - done.float())
        with torch.no_grad():
            if cfg.with_vtrace:
                log_rhos = log_prob.detach() - mb["log_probs"]
                vs, adv = vtrace(tm(log_rhos), tm(discounts), tm(rewards), tm(values.detach()), bootstrap,
                                 clip_rho_threshold=cfg.vtrace_rho, clip_pg_rho_threshold=cfg.vtrace_rho,
                                 lambda_=1.0, clip_c_threshold=cfg.vtrace_c)
            else:
                adv, vs = gae(tm(rewards), tm(values.detach()), bootstrap, tm(discounts), cfg.gae_lambda)
            vs, adv = tm(vs), tm(adv)
            if not (bool(torch.isfinite(vs).all()) and bool(torch.isfinite(adv).all())):
                self._skip_not_finite(mb, "value targets / advantages")
                return None
            if cfg.normalize_returns and getattr(model, "returns_normalizer", None) is not None:
                model.returns_normalizer.update(vs[valids])
            targets_norm = model.normalize_values(vs)
            old_values_norm = model.normalize_values(mb["values"])
            adv_valid = adv[valids]
            if adv_valid.numel() > 1:
                adv = (adv - adv_valid.mean()) / (adv_valid.std() + 1e-8)

        policy_loss, ratio = ppo_policy_loss(log_prob, mb["log_probs"], adv, cfg.ppo_clip_ratio, valids)
        value_loss = ppo_value_loss(values_norm, old_values_norm, targets_norm, cfg.ppo_clip_value, valids)
        entropy = dist.entropy().reshape(n, T)
        if cfg.exploration_loss == "symmetric_kl":
            ent_loss = symmetric_kl_loss(dist.symmetric_kl_with_uniform().reshape(n, T), valids)
        else:
            ent_loss = entropy_loss(entropy, valids)
        kl = old_dist.kl_divergence(dist).reshape(n, T)
        kl_term = kl_loss(kl, valids)
        loss = (policy_loss + cfg.value_loss_coeff * value_loss + cfg.exploration_loss_coeff * ent_loss
                + cfg.kl_loss_coeff * kl_term)

        if not bool(torch.isfinite(loss)):
            self._skip_not_finite(mb, "loss")
            return None
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        if not bool(torch.isfinite(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            self._skip_not_finite(mb, "gradients")
            return None
        self.consecutive_nan_batches = 0
        self.optimizer.step()
        self.train_step += 1
        self.weights.publish(model, self.train_step)

        return {
            "loss/total": loss.item(), "loss/policy": policy_loss.item(), "loss/value": value_loss.item(),
            f"loss/{cfg.exploration_loss}": ent_loss.item(), "loss/kl": kl_term.item(),
            "entropy": float(masked_mean(entropy.detach(), valids)), "kl": float(masked_mean(kl.detach(), valids)),
            "grad_norm": float(grad_norm), "ratio_mean": float(masked_mean(ratio.detach(), valids)),
            "adv_std": float(adv.std()) if adv.numel() > 1 else 0.0,
            "value_mean": float(values.detach().mean()), "target_mean": float(vs.mean()),
        }
