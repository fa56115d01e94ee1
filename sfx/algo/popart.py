"""PopArt: per-task adaptive rescaling of value targets that preserves the value head's outputs.

van Hasselt et al. 2016, "Learning values across many orders of magnitude" (ART: adaptive rescaling
of targets; POP: preserving outputs precisely; Algorithm 1), and Hessel et al. 2019, "Multi-task
Deep Reinforcement Learning with PopArt" (one set of statistics per task, V-trace targets, the
scale-invariant policy-gradient advantage).

The value head is a linear layer with ``K`` outputs, one normalised value ``n_k(x)`` per task.
Task ``k`` keeps a first moment ``mu_k`` and a second moment ``nu_k`` of its value targets; its
scale is ``sigma_k = sqrt(nu_k - mu_k^2)`` and its value in the reward scale is

    V_k(x) = sigma_k * n_k(x) + mu_k                               (unnormalize)
    n~     = (G - mu_k) / sigma_k                                  (normalize a target G of task k)

ART, once per learner step, for every task ``k`` with ``c_k > 0`` valid targets ``G_i`` in the batch
(over all data-parallel ranks), making up ``u_k`` units (trajectories, below):

    mean_k  = (1 / c_k) sum_{i: task_i = k} G_i
    mean2_k = (1 / c_k) sum_{i: task_i = k} G_i^2
    a_k     = 1 - (1 - beta)^{u_k}                  (u_k steps of size beta)
    w_k    <- w_k + a_k (1 - w_k)                   (data weight: 1 - (1 - beta)^(all units so far); 0 at first)
    mu_k   <- mu_k + (a_k / w_k) (mean_k - mu_k)
    nu_k   <- nu_k + (a_k / w_k) (mean2_k - nu_k)
    sigma_k = min(clip_max, sqrt(max(nu_k - mu_k^2, clip_min^2)))     (clip_min: --popart_clip_min)

and tasks with no valid target keep their statistics. ``mu`` and ``nu`` are the exponential moving
averages ``m <- (1 - a) m + a mean`` started at 0, divided by ``w`` (Adam's bias correction, Kingma & Ba
2015): the first batch of a task sets its statistics to that batch's moments (``a / w = 1``), the next
ones average all the task's data so far (rate ``~ 1 / t`` while ``t beta << 1``), and once ``w ~ 1``
it is the papers' moving average (rate ``a``). Without it, the initial ``mu = 0``, ``nu = 1`` would keep
a weight ``(1 - beta)^u`` for thousands of trajectories: ``sigma ~ sqrt(u beta)`` times the targets'
root mean square, far from their spread. POP, right after, with the old ``(mu, sigma)`` and the new
``(mu', sigma')`` (row ``k`` of the head's weight ``W [K, H]`` and bias ``b [K]``):

    W_k <- W_k * sigma_k / sigma'_k
    b_k <- (sigma_k b_k + mu_k - mu'_k) / sigma'_k

so ``sigma'_k (W'_k h + b'_k) + mu'_k = sigma_k (W_k h + b_k) + mu_k`` for every feature ``h``: the
head's values in the reward scale are unchanged by the new statistics. A task's first statistics (from
``w_k = 0``) leave its row as it is: it has never been trained on normalised targets, so there is
nothing to preserve, and rescaling it by ``1 / sigma'_k`` would only shrink it.

``beta`` per trajectory, Brain Agent's rate (its DMLab-30 agent: ``beta = 3e-4``), which folds in the
trajectories of the learner's batch one at a time (``mu <- (1 - beta) mu + beta * (the trajectory's
mean target)``). A unit is one entry of ``tasks``: a trajectory when ``tasks`` is ``[B]`` for ``[B, T]``
targets (the learner's call; a trajectory with part of its samples valid is that fraction of a unit), a
sample when ``tasks`` has the targets' shape (van Hasselt et al.'s Algorithm 1 and Hessel et al. 2019
move the statistics per sample). ``u_k`` units move them ``a_k = 1 - (1 - beta)^{u_k}`` of the way,
exactly as ``u_k`` updates of one unit each would, so ``beta`` means the same whatever the batch size or
the task mix; they move towards the task's batch mean, where folding the units in one at a time would
weigh the later ones more: the two differ by at most ``(u_k beta)^2`` times the spread of the units'
means (order-free, and split over data-parallel ranks as per-task sums and counts that one all-reduce
adds up). Moving once per learner step instead would make the statistics (trajectories per task per
batch) times slower; moving per sample of a trajectory, ``T`` times faster (what was measured of both:
docs/appendix/agents_flag_notes.md, "PopArt's rate").

Following the mean (``popart_step(..., preserve_mean=False)``, sfx's learner; issue 29). Preserving the
outputs precisely, a value head learns its task's mean by gradient steps only, in units of ``sigma``. With
bootstrapped targets that is slow whenever the value starts far from the returns compared with the targets'
spread: a step of Adam moves a normalised output by about its learning rate, and the targets bootstrap from
the value, so each move of the value closes only part of that move of the gap it sees (an Acrobot example with
its figures: docs/appendix/agents_flag_notes.md, "PopArt: following the mean"). The returns normalizer (``--normalize_returns``, Sample Factory's), which never rescales the head, moves every
value by the move of its running mean: the value's level follows the targets' running mean for free. So with
``preserve_mean=False`` POP preserves the scale only: each row is multiplied by ``sigma / sigma'`` (weight and
bias), ``sigma' n'(x) = sigma n(x)``: every value's deviation from its task's mean (what tells states apart,
and what a change of ``sigma`` would otherwise blow up or shrink) is kept exactly, and every value of task
``k`` moves by ``mu'_k - mu_k``, in that task's own units, so scale invariance across tasks is kept. ``mu``
moves at the bias-corrected rate (about ``1 / t`` early, ``1 - (1 - beta)^u`` per step later), so the
values move smoothly. ``preserve_mean=True`` is the papers' exact POP.

A task's first batch: its first statistics can be set before that batch's loss (``popart_first_statistics``,
sfx's learner), as the returns normalizer's are: otherwise the first value loss is on the reward scale (a
squared error of ~1e5 at x1000 rewards, clipped to ``--max_grad_norm``), and its gradient fills Adam's
moments for the next hundred steps.

Initial statistics: ``mu = 0``, ``nu = 1`` (``sigma = 1``), ``w = 0``, so a fresh head's output is its
value in the reward scale. ``PopArtStats.weight = None`` (a caller that keeps only ``mu`` and ``nu``):
a task counts as fresh (``w = 0``) while its statistics are exactly ``mu = 0``, ``nu = 1`` and as warmed
up (``w = 1``, no correction) after, so its first batch still sets its statistics. ``beta = 1`` makes
the statistics the last batch's moments.

Numerics: statistics are float64 whatever the targets' dtype, and the per-task sums are summed in
float64. ``nu - mu^2`` loses about ``1e-16 * mu^2`` to cancellation (``1e-4`` for targets of scale
``1e6``), which is why ``sigma`` is clipped from below; only the derived ``sigma`` is clipped,
``mu`` and ``nu`` never are.

In a learning step (van Hasselt et al.'s order: statistics, then rescale, then the gradient step; sfx's
learner sets a task's first statistics before the loss and calls ``popart_step`` after the optimizer step,
below):

    features -> head -> n [*, K];  V = popart_unnormalize(select_task_values(n, tasks), tasks, mu, sigma)
    vs, A  = V-trace / GAE on V (reward scale)
    step   = popart_step(stats, head, vs, tasks, beta, clip_min, valid=valids, reduce=reduce)
    n'     = head(features) again (the rescale changed the head in place; the features' graph is intact)
    value loss on select_task_values(n', tasks) against popart_normalize(vs, tasks, step.stats.mu, step.sigma)
    policy loss on popart_advantages(A, tasks, step.sigma)
    backward, optimizer step; publish the head together with step.stats

A learner that cannot run the head alone may instead call ``popart_step`` after the optimizer step
(normalising this batch's targets with the statistics before it): the rescale is still exact, the
statistics lag one batch. Calling it between the forward pass and ``backward`` is an error (autograd
refuses the in-place change of the head), except when every task in the batch gets its first statistics:
then no row is rescaled and the head is not written.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch
from torch import nn

__all__ = ["POPART_SIGMA_MAX", "PopArtStats", "PopArtStep", "is_initial", "popart_advantages",
           "popart_first_statistics", "popart_normalize", "popart_preserve_", "popart_rates", "popart_rescaled_head",
           "popart_step", "popart_unnormalize", "popart_update", "select_task_values"]

# default upper clip of sigma (Brain Agent's): fine for float32 values; sigma is cast to the values' dtype in
# popart_(un)normalize, so float16 values need clip_max below 65504 (Brain Agent uses 1e4 for half precision)
POPART_SIGMA_MAX = 1e6

# a sum over data-parallel ranks (torch.distributed.all_reduce, or the identity with one rank)
Reduce = Callable[[torch.Tensor], torch.Tensor]


class PopArtStats(NamedTuple):
    """Per-task moments of the value targets, float64, ``[K]`` each.

    Attributes:
        mu: first moment ``E[G]`` of each task's targets (bias-corrected exponential moving average).
        nu: second moment ``E[G^2]`` of each task's targets (bias-corrected exponential moving average).
        weight: ``1 - (1 - beta)^u`` after ``u`` units (trajectories) of the task: the share of data in the
            moving average before its bias correction (0: no data yet). ``None``: not kept by the caller;
            a task then counts as fresh (0) while ``mu = 0, nu = 1`` exactly and as warmed up (1) after.
    """

    mu: torch.Tensor
    nu: torch.Tensor
    weight: torch.Tensor | None = None

    @classmethod
    def initial(cls, num_tasks: int, device: torch.device | str | None = None) -> "PopArtStats":
        """``mu = 0``, ``nu = 1`` (``sigma = 1``: normalisation is the identity), ``weight = 0`` for each of
        ``num_tasks`` tasks."""
        if int(num_tasks) < 1:
            raise ValueError(f"PopArtStats.initial: num_tasks={num_tasks}, must be >= 1")
        return cls(mu=torch.zeros(int(num_tasks), dtype=torch.float64, device=device),
                   nu=torch.ones(int(num_tasks), dtype=torch.float64, device=device),
                   weight=torch.zeros(int(num_tasks), dtype=torch.float64, device=device))

    def data_weight(self) -> torch.Tensor:
        """``weight``, or where it is not kept, 0 for the tasks at exactly ``mu = 0, nu = 1`` and 1 for the others."""
        if self.weight is not None:
            return self.weight
        return torch.where((self.mu == 0.0) & (self.nu == 1.0), torch.zeros_like(self.mu), torch.ones_like(self.mu))

    @property
    def num_tasks(self) -> int:
        return int(self.mu.shape[0])

    def sigma(self, clip_min: float, clip_max: float = POPART_SIGMA_MAX) -> torch.Tensor:
        """``[K]`` float64 scales ``min(clip_max, sqrt(max(nu - mu^2, clip_min^2)))``.

        What is clipped is the standard deviation ``sigma`` (``--popart_clip_min``, default 1e-4), not
        the variance: a task whose targets are (nearly) constant, or whose ``nu - mu^2`` rounded below 0,
        gets ``sigma = clip_min`` instead of 0 or NaN, so ``1 / sigma`` stays finite."""
        _check_clip(clip_min, clip_max)
        var = (self.nu - self.mu * self.mu).clamp(min=float(clip_min) ** 2)
        return var.sqrt().clamp(max=float(clip_max))


class PopArtStep(NamedTuple):
    """``popart_step``'s result: the new statistics and the scales before and after, ``[K]`` float64.

    Attributes:
        stats: the new statistics (keep them for the next step, checkpoint them, publish them).
        sigma: the new clipped scales (``stats.sigma(clip_min, clip_max)``).
        old_mu: the first moments before the update.
        old_sigma: the clipped scales before the update.
        rescaled: ``[K]`` bool, the tasks whose head row was rescaled to preserve its outputs (all but the
            tasks that got their first statistics in this step).
    """

    stats: PopArtStats
    sigma: torch.Tensor
    old_mu: torch.Tensor
    old_sigma: torch.Tensor
    rescaled: torch.Tensor


def _check_clip(clip_min: float, clip_max: float) -> None:
    if not clip_min > 0.0:
        raise ValueError(f"popart: clip_min={clip_min} must be > 0 (it keeps 1 / sigma finite)")
    if not clip_max >= clip_min:
        raise ValueError(f"popart: clip_max={clip_max} must be >= clip_min={clip_min}")


def _rows(fn: str, name: str, x: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``x`` with ``shape``: as is when the shapes match; a leading prefix of ``shape`` (one value per
    trajectory ``[B]`` for samples ``[B, T]``) is repeated along the trailing dimensions (a view)."""
    if x.shape == shape:
        return x
    if tuple(shape[:x.dim()]) != tuple(x.shape):
        raise ValueError(f"{fn}: {name} has shape {tuple(x.shape)}; expected {tuple(shape)} or a leading "
                         f"prefix of it (one value per row)")
    return x.reshape(*x.shape, *([1] * (len(shape) - x.dim()))).expand(shape)


def _expand_tasks(fn: str, tasks: torch.Tensor | None, shape: torch.Size, device: torch.device) -> torch.Tensor:
    """Integer task ids of ``shape`` (see ``_rows``); ``None`` is task 0 everywhere (K = 1)."""
    if tasks is None:
        return torch.zeros(shape, dtype=torch.long, device=device)
    if tasks.is_floating_point() or tasks.is_complex() or tasks.dtype == torch.bool:
        raise ValueError(f"{fn}: tasks must hold integer task ids, got dtype {tasks.dtype}")
    return _rows(fn, "tasks", tasks.to(device), shape)


def popart_rates(beta: float, units: torch.Tensor) -> torch.Tensor:
    """``1 - (1 - beta)^units`` per task, float64: how far ``units`` updates of size ``beta`` move a moving
    average (e.g. ``units`` = a task's valid samples in a batch). Computed as
    ``-expm1(units * log1p(-beta))``, exact for ``beta = 1`` and accurate for tiny ``beta``."""
    if not 0.0 < beta <= 1.0:
        raise ValueError(f"popart_rates: beta={beta} must be in (0, 1]")
    units = units.to(torch.float64)
    if beta == 1.0:
        return torch.where(units > 0, torch.ones_like(units), torch.zeros_like(units))
    return -torch.expm1(units * math.log1p(-beta))


def is_initial(stats: PopArtStats) -> torch.Tensor:
    """``[K]`` bool: the tasks that have not seen a batch yet (``data_weight() == 0``): their next update takes
    the batch's moments."""
    return stats.data_weight() == 0.0


def popart_update(stats: PopArtStats, targets: torch.Tensor, tasks: torch.Tensor | None, beta: float,
                  valid: torch.Tensor | None = None, reduce: Reduce | None = None) -> PopArtStats:
    """ART: each task's statistics moved towards its batch moments at its rate (module docstring); new tensors.

    Args:
        stats: the current statistics, ``[K]`` float64.
        targets: value targets in the reward scale (e.g. V-trace ``vs``), any shape ``S`` and float dtype.
        tasks: integer task ids in ``[0, K)``, of shape ``S`` or a leading prefix of it (``[B]`` for
            ``[B, T]`` targets); ``None``: every sample is task 0 (single-task PopArt), one unit per leading
            row (a trajectory of ``[B, T]`` targets). Each entry of ``tasks`` is one unit of ``beta``.
        beta: step size in ``(0, 1]`` per unit (``--popart_beta``): per trajectory for ``[B]`` tasks,
            per sample for tasks of the targets' shape.
        valid: bool of shape ``S`` (or a leading prefix); samples where it is False do not count (their
            targets and task ids may be anything, NaN included). ``None``: all count.
        reduce: with data-parallel ranks, a sum over ranks; the per-task counts, units, sums and sums of
            squares (one ``[4, K]`` float64 tensor) go through it in a single call, so every rank gets the
            statistics of all ranks' samples. It is a collective: every rank must call ``popart_update``
            at every step, with an empty or all-invalid batch too.

    Returns:
        The new ``PopArtStats`` (``weight`` None where ``stats.weight`` is None); tasks with no valid sample
        (over all ranks) keep theirs; tasks without data yet (``is_initial``) take their batch's moments.
    """
    if not 0.0 < beta <= 1.0:
        raise ValueError(f"popart_update: beta={beta} must be in (0, 1]")
    mu, nu = stats.mu, stats.nu
    num_tasks = mu.shape[0]
    if mu.dtype != torch.float64 or nu.dtype != torch.float64 or mu.shape != (num_tasks,) or nu.shape != mu.shape:
        raise ValueError(f"popart_update: stats must be two [K] float64 tensors, got mu {tuple(mu.shape)} "
                         f"{mu.dtype}, nu {tuple(nu.shape)} {nu.dtype}")
    if stats.weight is not None and (stats.weight.dtype != torch.float64 or stats.weight.shape != mu.shape):
        raise ValueError(f"popart_update: stats.weight must be a [K] float64 tensor like mu, got "
                         f"{tuple(stats.weight.shape)} {stats.weight.dtype}")
    with torch.no_grad():
        g = targets.detach().to(device=mu.device, dtype=torch.float64)
        if tasks is None:
            prefix = g.shape[:1]
            ids = torch.zeros(prefix, dtype=torch.long, device=mu.device)
        else:
            prefix = tasks.shape
            ids = tasks.to(mu.device)
        ids = _expand_tasks("popart_update", ids, g.shape, g.device).to(mu.device)
        # samples per unit (per entry of `tasks`): each valid sample is 1 / per_unit of a unit
        per_unit = g.numel() // max(1, math.prod(prefix)) if g.numel() else 1
        if valid is None:
            keep = torch.ones_like(g, dtype=torch.bool)
        else:
            keep = _rows("popart_update", "valid", valid.to(device=mu.device, dtype=torch.bool), g.shape)
        ids = torch.where(keep, ids, torch.zeros_like(ids)).reshape(-1).long()
        if ids.numel() and bool(((ids < 0) | (ids >= num_tasks)).any()):
            bad = ids[(ids < 0) | (ids >= num_tasks)][0].item()
            raise ValueError(f"popart_update: task id {bad} out of range; allowed: 0 .. {num_tasks - 1} "
                             f"(K={num_tasks})")
        w = keep.reshape(-1).to(torch.float64)
        g = torch.where(keep, g, torch.zeros_like(g)).reshape(-1)  # masked-out NaNs must not reach the sums
        moments = torch.zeros(4, num_tasks, dtype=torch.float64, device=mu.device)
        moments[0].index_add_(0, ids, w)
        moments[1].index_add_(0, ids, w / per_unit)
        moments[2].index_add_(0, ids, g)
        moments[3].index_add_(0, ids, g * g)
        if reduce is not None:
            moments = reduce(moments)
        count, units, total, squares = moments.unbind()
        present = count > 0
        n = count.clamp(min=1.0)
        a = popart_rates(beta, units)  # the moving average's step for these units
        old_weight = stats.data_weight()
        weight = old_weight + a * (1.0 - old_weight)  # 1 - (1 - beta)^(all units so far)
        # bias-corrected: the step of the raw average divided by its data share (1 on a task's first batch)
        rate = torch.where(present, a / weight.clamp(min=torch.finfo(torch.float64).tiny), torch.zeros_like(a))
        new_mu = torch.where(present, mu + rate * (total / n - mu), mu)
        new_nu = torch.where(present, nu + rate * (squares / n - nu), nu)
        new_weight = torch.where(present, weight, old_weight) if stats.weight is not None else None
    return PopArtStats(mu=new_mu, nu=new_nu, weight=new_weight)


def popart_first_statistics(stats: PopArtStats, targets: torch.Tensor, tasks: torch.Tensor | None, beta: float,
                            valid: torch.Tensor | None = None,
                            reduce: Reduce | None = None) -> tuple[PopArtStats, torch.Tensor]:
    """The first statistics of the tasks that have none yet (``is_initial``) and valid targets in this batch:
    exactly what ``popart_update`` gives them (their batch moments, data weight ``1 - (1 - beta)^units``), for
    a learner that sets them *before* the batch's loss, so that a task's first value loss is on normalised
    targets like every later one (module docstring, "A task's first batch"). The other tasks keep theirs.

    Arguments as in ``popart_update`` (with ``reduce`` it is a collective: every rank calls this at the same
    steps, e.g. whenever ``is_initial(stats).any()``, which is the same on every rank). Returns the
    statistics and ``[K]`` bool, the tasks that got their first statistics here: a later ``popart_step`` on
    the same batch must leave their samples out (``valid``), or the batch would count twice for them. Their
    head rows need no rescale (``popart_step`` leaves a task's row alone at its first statistics too)."""
    new = popart_update(stats, targets, tasks, beta, valid=valid, reduce=reduce)
    first = is_initial(stats) & ~is_initial(new)
    weight = None if stats.weight is None else torch.where(first, new.weight, stats.weight)
    return PopArtStats(mu=torch.where(first, new.mu, stats.mu), nu=torch.where(first, new.nu, stats.nu),
                       weight=weight), first


def popart_normalize(values: torch.Tensor, tasks: torch.Tensor | None, mu: torch.Tensor,
                     sigma: torch.Tensor) -> torch.Tensor:
    """``(values - mu[task]) / sigma[task]`` per sample, in ``values``' dtype (reward scale -> head scale).

    ``values`` any shape ``S``; ``tasks`` of shape ``S``, a leading prefix of it, or ``None`` (task 0);
    ``mu``, ``sigma`` ``[K]`` (``sigma`` already clipped, e.g. ``stats.sigma(clip_min)``)."""
    ids = _expand_tasks("popart_normalize", tasks, values.shape, values.device)
    inv = (1.0 / sigma).to(device=values.device, dtype=values.dtype)
    shift = (-mu / sigma).to(device=values.device, dtype=values.dtype)
    return torch.addcmul(shift[ids], values, inv[ids])


def popart_unnormalize(values: torch.Tensor, tasks: torch.Tensor | None, mu: torch.Tensor,
                       sigma: torch.Tensor) -> torch.Tensor:
    """``sigma[task] * values + mu[task]`` per sample, in ``values``' dtype (head scale -> reward scale);
    the inverse of ``popart_normalize``. Gradients flow through ``values``."""
    ids = _expand_tasks("popart_unnormalize", tasks, values.shape, values.device)
    scale = sigma.to(device=values.device, dtype=values.dtype)
    shift = mu.to(device=values.device, dtype=values.dtype)
    return torch.addcmul(shift[ids], values, scale[ids])


def select_task_values(outputs: torch.Tensor, tasks: torch.Tensor | None) -> torch.Tensor:
    """Each sample's own task column of the value head: ``outputs [*S, K]`` -> ``[*S]``,
    ``outputs[..., tasks]`` per sample (``tasks`` of shape ``S``, a leading prefix of it, or ``None``:
    column 0). Gradients flow through the selected column only."""
    ids = _expand_tasks("select_task_values", tasks, outputs.shape[:-1], outputs.device)
    return outputs.gather(-1, ids.unsqueeze(-1).long()).squeeze(-1)


def popart_advantages(advantages: torch.Tensor, tasks: torch.Tensor | None, sigma: torch.Tensor) -> torch.Tensor:
    """Scale-invariant policy-gradient advantages (Hessel et al. 2019, the actor's update with PopArt):

        (r_t + gamma v_{t+1} - mu_k) / sigma_k - n_k(x_t) = (r_t + gamma v_{t+1} - V_k(x_t)) / sigma_k

    since ``V_k = sigma_k n_k + mu_k``: the advantage in the reward scale divided by its task's
    ``sigma`` (the scale the values came from), so every task's policy gradient has the same
    magnitude whatever its reward scale. Same shape and dtype as ``advantages``."""
    ids = _expand_tasks("popart_advantages", tasks, advantages.shape, advantages.device)
    inv = (1.0 / sigma).to(device=advantages.device, dtype=advantages.dtype)
    return advantages * inv[ids]


def popart_rescaled_head(weight: torch.Tensor, bias: torch.Tensor, old_mu: torch.Tensor, old_sigma: torch.Tensor,
                         mu: torch.Tensor, sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """POP as a pure function: the head ``(W [K, H], b [K])`` that gives under ``(mu, sigma)`` the
    reward-scale values ``(W, b)`` gave under ``(old_mu, old_sigma)`` (module docstring). Computed in
    float64, returned in the dtypes of ``weight`` and ``bias``, detached."""
    num_tasks = old_mu.shape[0]
    if weight.dim() != 2 or weight.shape[0] != num_tasks or bias.shape != (num_tasks,):
        raise ValueError(f"popart: the value head must be weight [K, H] and bias [K] with K={num_tasks} tasks, got "
                         f"weight {tuple(weight.shape)}, bias {tuple(bias.shape)}")
    with torch.no_grad():
        def f64(x: torch.Tensor) -> torch.Tensor:
            return x.detach().to(device=weight.device, dtype=torch.float64)

        old_s, new_s = f64(old_sigma), f64(sigma)
        new_w = (f64(weight) * (old_s / new_s).unsqueeze(1)).to(weight.dtype)
        new_b = ((old_s * f64(bias) + f64(old_mu) - f64(mu)) / new_s).to(bias.dtype)
    return new_w, new_b


def popart_preserve_(head: nn.Linear, old_mu: torch.Tensor, old_sigma: torch.Tensor, mu: torch.Tensor,
                     sigma: torch.Tensor) -> None:
    """POP in place on the value head ``nn.Linear(H, K)`` (weight ``[K, H]``, bias ``[K]``), without
    autograd: its reward-scale outputs under ``(mu, sigma)`` equal those under ``(old_mu, old_sigma)``.

    The parameters stay the same tensors (the optimizer keeps tracking them). The optimizer's state is
    not touched: neither paper rescales it (Algorithm 1 is plain SGD; Hessel et al. describe no change
    to their RMSProp statistics), so Adam's moments for the head stay in the old scale: a mismatch of
    the order of ``sigma_old / sigma_new - 1`` (``O(beta)``) per step. The parameters' version counters
    move, so a graph built before this call cannot be backpropagated through the head afterwards
    (autograd says so; nothing is silently wrong)."""
    if head.bias is None:
        raise ValueError("popart_preserve_: the value head has no bias; PopArt needs one to absorb the shift mu")
    new_w, new_b = popart_rescaled_head(head.weight, head.bias, old_mu, old_sigma, mu, sigma)
    with torch.no_grad():
        head.weight.copy_(new_w)
        head.bias.copy_(new_b)


def popart_step(stats: PopArtStats, head: nn.Linear, targets: torch.Tensor, tasks: torch.Tensor | None, beta: float,
                clip_min: float, clip_max: float = POPART_SIGMA_MAX, valid: torch.Tensor | None = None,
                reduce: Reduce | None = None, preserve_mean: bool = True) -> PopArtStep:
    """ART then POP in one call: ``popart_update`` from this batch's targets, then ``popart_preserve_``
    on ``head`` from the old to the new clipped ``(mu, sigma)``, except the rows of the tasks that got
    their first statistics (left as they are: module docstring). Arguments as in those two; ``clip_min``
    is ``--popart_clip_min``. Returns the new statistics, both scales and which rows were rescaled.

    ``preserve_mean=False``: POP for the scale only (module docstring, "Following the mean"): the rows are
    rescaled by ``sigma / sigma'`` (weight and bias), so each value's deviation from its task's mean,
    ``sigma * n(x)``, is preserved and every value of task ``k`` moves by ``mu'_k - mu_k``."""
    _check_clip(clip_min, clip_max)
    old_sigma = stats.sigma(clip_min, clip_max)
    new = popart_update(stats, targets, tasks, beta, valid=valid, reduce=reduce)
    sigma = new.sigma(clip_min, clip_max)
    # a task's first statistics: its head row has never been trained on normalised targets, so there are no
    # outputs to preserve; it stays as it is (rescaling it by sigma_old / sigma_new would only shrink it)
    rescaled = ~(is_initial(stats) & ~is_initial(new))
    if head.bias is None:
        raise ValueError("popart_step: the value head has no bias; PopArt needs one to absorb the shift mu")
    # preserve_mean=False: the rescale as if the mean had not moved (W, b times sigma / sigma'), so the outputs
    # follow the move of the mean
    new_w, new_b = popart_rescaled_head(head.weight, head.bias, stats.mu if preserve_mean else new.mu, old_sigma,
                                        new.mu, sigma)
    keep = rescaled.to(head.weight.device)
    if bool(keep.any()):  # nothing to rescale (only first statistics): the head is not touched at all
        with torch.no_grad():
            head.weight.copy_(torch.where(keep.unsqueeze(1), new_w, head.weight))
            head.bias.copy_(torch.where(keep, new_b, head.bias))
    return PopArtStep(stats=new, sigma=sigma, old_mu=stats.mu, old_sigma=old_sigma, rescaled=rescaled)
