"""Aggregate scores over runs and tasks as the field reports them (Agarwal et al. 2021, "Deep Reinforcement
Learning at the Edge of the Statistical Precipice"): interquartile mean, optimality gap, probability of
improvement, with stratified bootstrap confidence intervals, and performance profiles. numpy only.

``scores`` is ``[num_runs, num_tasks]`` (a run: one seed; normalise per task first where a suite defines
scores, e.g. Atari human-normalised ``(score - random) / (human - random)``, see
:mod:`sfx.envs.task_scores`, which holds the Atari-57 random and human scores and their source; sfx_tb does not
import it: sfx_tb stands alone).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np


def _scores(scores) -> np.ndarray:
    x = np.asarray(scores, dtype=float)
    if x.ndim == 1:
        x = x[:, None]  # one task
    if x.ndim != 2 or x.size == 0:
        raise ValueError(f"scores must be [num_runs, num_tasks] and non-empty, got shape {x.shape}")
    return x


def interquartile_mean(scores) -> float:
    """Mean of the middle 50% of all run x task scores: sort the ``n`` scores, drop ``floor(n / 4)`` from each
    end, average the rest (scipy.stats.trim_mean(x, 0.25) on the flattened scores)."""
    x = np.sort(_scores(scores).ravel())
    k = int(np.floor(0.25 * x.size))
    return float(x[k:x.size - k].mean())


def median_of_task_means(scores) -> float:
    """The median over tasks of each task's mean score over runs (the "median" the field has reported since
    DQN, kept beside the IQM for comparison)."""
    return float(np.median(_scores(scores).mean(axis=0)))


def optimality_gap(scores, gamma: float = 1.0) -> float:
    """How far below ``gamma`` the scores fall on average: ``gamma - mean(min(score, gamma))``."""
    return float(gamma - np.minimum(_scores(scores), gamma).mean())


def probability_of_improvement(x, y) -> float:
    """P(X > Y): for each task m, the chance that a random run of X beats a random run of Y on m (ties
    count half): ``1/(N K) sum_i sum_j [x_im > y_jm] + 0.5 [x_im == y_jm]``, averaged over tasks.
    ``x``: [N, M], ``y``: [K, M] (the same tasks, run counts may differ)."""
    x, y = _scores(x), _scores(y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must score the same tasks: {x.shape[1]} and {y.shape[1]} columns")
    a, b = x[:, None, :], y[None, :, :]
    per_task = ((a > b) + 0.5 * (a == b)).mean(axis=(0, 1))
    return float(per_task.mean())


def performance_profile(scores, taus) -> np.ndarray:
    """The run-score distribution: for each ``tau``, the fraction of run x task scores above it (each task
    weighs the same: the fraction per task, averaged over tasks)."""
    x = _scores(scores)
    taus = np.asarray(taus, dtype=float)
    return np.array([(x > t).mean(axis=0).mean() for t in taus])


class Interval(NamedTuple):
    value: float   # the statistic on the scores themselves
    low: float     # the confidence interval's ends (percentile bootstrap)
    high: float


def stratified_resamples(samples, reps: int, seed: int | None = 0):
    """``reps`` stratified bootstrap replicates of ``samples`` ([num_runs, num_tasks] arrays): each resamples
    the runs of every task independently, with replacement (the tasks stay fixed: they are the strata).
    Yields one list of resampled arrays per replicate."""
    rng = np.random.default_rng(seed)
    arrays = [_scores(s) for s in samples]
    for _ in range(reps):
        resampled = []
        for a in arrays:
            n, m = a.shape
            rows = rng.integers(0, n, size=(n, m))
            resampled.append(a[rows, np.arange(m)[None, :]])
        yield resampled


def _percentile_interval(values: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence!r} must be in (0, 1), e.g. 0.95")
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail], axis=0)
    return low, high


def stratified_bootstrap(statistic: Callable[..., float], *samples, reps: int = 2000, confidence: float = 0.95,
                         seed: int | None = 0) -> Interval:
    """Percentile confidence interval of ``statistic(*samples)`` by the stratified bootstrap: each replicate
    resamples the runs of every task independently, with replacement (the tasks stay fixed: they are the
    strata), for every sample. ``samples``: [num_runs, num_tasks] arrays."""
    arrays = [_scores(s) for s in samples]
    values = np.array([statistic(*r) for r in stratified_resamples(arrays, reps, seed)])
    low, high = _percentile_interval(values, confidence)
    return Interval(float(statistic(*arrays)), float(low), float(high))


def performance_profile_band(scores, taus, reps: int = 500, confidence: float = 0.95,
                             seed: int | None = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`performance_profile` at ``taus`` with its pointwise stratified bootstrap percentile band:
    ``(profile, low, high)``, each one value per tau."""
    x = _scores(scores)
    curves = np.array([performance_profile(r[0], taus) for r in stratified_resamples([x], reps, seed)])
    low, high = _percentile_interval(curves, confidence)
    return performance_profile(x, taus), low, high
