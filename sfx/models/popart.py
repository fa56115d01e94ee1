"""PopArt's statistics as part of the model (``ActorCritic.popart`` with ``--popart``): one value output per
task, each trained on targets normalised by its task's statistics; the math is :mod:`sfx.algo.popart`.

The statistics are buffers, so they travel with the weights: saved in checkpoints, restored on resume,
published to the policy workers together with the head they belong to (a policy worker must never pair a
rescaled head with old statistics: both are in the same published copy). ``mu`` and ``nu`` are float64
(the learner's moments); ``sigma`` is kept as a buffer too, computed in float64 after each update, because
the published copy is float32 and ``sqrt(nu - mu^2)`` recomputed from float32 moments of large returns
(``1e5``: ``nu ~ 1e10``) would lose every digit to cancellation.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from sfx.algo.popart import (PopArtStats, is_initial, popart_first_statistics, popart_normalize, popart_step,
                             popart_unnormalize)


class PopArt(nn.Module):
    """Per-task statistics of the value targets: ``mu``, ``nu`` (float64) and ``sigma`` (``[K]`` each).

    ``normalize`` / ``denormalize`` map values between the reward scale and the head's per-task scale;
    ``update`` moves the statistics towards a minibatch's targets and rescales the value head so its
    reward-scale outputs do not change (call it after the optimizer step), except for the move of each task's
    mean with ``preserve_mean=False`` (the default: :mod:`sfx.algo.popart`, "Following the mean");
    ``first_statistics`` gives the tasks without statistics their first ones before a minibatch's loss."""

    def __init__(self, num_tasks: int, beta: float, clip_min: float, preserve_mean: bool = False) -> None:
        super().__init__()
        initial = PopArtStats.initial(num_tasks)
        self.beta = float(beta)
        self.clip_min = float(clip_min)
        self.preserve_mean = bool(preserve_mean)
        self.register_buffer("mu", initial.mu)
        self.register_buffer("nu", initial.nu)
        self.register_buffer("sigma_", initial.sigma(self.clip_min))
        # the data weight of the moving averages (their bias correction, sfx.algo.popart)
        self.register_buffer("weight", initial.weight)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        saved = state_dict.get(prefix + "mu")
        if saved is not None and saved.shape != self.mu.shape:
            # said first, in the user's terms (a size mismatch of the value head follows from it)
            error_msgs.insert(0, f"PopArt was trained on {saved.shape[0]} task(s), the env now has {self.num_tasks} "
                                 f"(--env and its task list): use the tasks it was trained with")
            return
        # checkpoints from before the data weight: a task whose statistics moved is warmed up (weight 1)
        key = prefix + "weight"
        if key not in state_dict and prefix + "mu" in state_dict:
            mu, nu = state_dict[prefix + "mu"], state_dict[prefix + "nu"]
            state_dict[key] = torch.where((mu == 0) & (nu == 1), torch.zeros_like(mu), torch.ones_like(mu))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    @property
    def num_tasks(self) -> int:
        return int(self.mu.shape[0])

    def sigma(self, tasks: torch.Tensor | None = None) -> torch.Tensor:
        """``[K]`` float64 scales, or with ``tasks`` (any shape) each sample's task's scale in float32."""
        if tasks is None:
            return self.sigma_
        return self.sigma_.to(torch.float32)[tasks.to(device=self.sigma_.device, dtype=torch.long)]

    def normalize(self, values: torch.Tensor, tasks: torch.Tensor | None) -> torch.Tensor:
        return popart_normalize(values, tasks, self.mu, self.sigma_)

    def denormalize(self, values: torch.Tensor, tasks: torch.Tensor | None) -> torch.Tensor:
        return popart_unnormalize(values, tasks, self.mu, self.sigma_)

    def _set(self, stats: PopArtStats) -> None:
        self.mu.copy_(stats.mu)
        self.nu.copy_(stats.nu)
        self.weight.copy_(stats.weight)
        self.sigma_.copy_(stats.sigma(self.clip_min))

    @torch.no_grad()
    def first_statistics(self, targets: torch.Tensor, tasks: torch.Tensor | None, valid: torch.Tensor | None,
                         reduce: Any = None) -> torch.Tensor | None:
        """Before a minibatch's loss: the tasks without statistics yet that have valid targets in it get their
        first ones (:func:`sfx.algo.popart.popart_first_statistics`), so their first value loss is on
        normalised targets. Returns ``[K]`` bool, the tasks set here (pass it to ``update`` as ``skip``), or
        None when every task had statistics already (then nothing is computed, and with ``reduce`` nothing is
        collective: the data weights, the same on every rank, decide that alike on all ranks)."""
        stats = PopArtStats(self.mu, self.nu, self.weight)
        if not bool(is_initial(stats).any()):
            return None
        new, first = popart_first_statistics(stats, targets, tasks, self.beta, valid=valid, reduce=reduce)
        self._set(new)
        return first

    @torch.no_grad()
    def update(self, targets: torch.Tensor, tasks: torch.Tensor | None, valid: torch.Tensor | None,
               head: nn.Linear, reduce: Any = None, skip: torch.Tensor | None = None) -> None:
        """ART then POP (:func:`sfx.algo.popart.popart_step`): every task's statistics move towards its valid
        targets in this minibatch (over all ranks with ``reduce``, a collective every rank calls), and
        ``head`` (``nn.Linear(H, K)``) is rescaled in place to preserve its outputs (with ``preserve_mean``
        False: their deviations from each task's mean). ``skip``: ``[K]`` bool, tasks whose samples do not
        count (``first_statistics`` already took this minibatch's)."""
        if skip is not None and bool(skip.any()):
            ids = torch.zeros(targets.shape[:1], dtype=torch.long, device=targets.device) if tasks is None else tasks
            keep = ~skip.to(targets.device)[ids.to(device=targets.device, dtype=torch.long)]
            keep = keep.reshape(*keep.shape, *([1] * (targets.dim() - keep.dim()))).expand(targets.shape)
            if valid is not None:
                valid = valid.to(device=targets.device, dtype=torch.bool)
                keep = keep & valid.reshape(*valid.shape, *([1] * (targets.dim() - valid.dim()))).expand(targets.shape)
            valid = keep
        step = popart_step(PopArtStats(self.mu, self.nu, self.weight), head, targets, tasks, self.beta, self.clip_min,
                           valid=valid, reduce=reduce, preserve_mean=self.preserve_mean)
        self._set(step.stats)
