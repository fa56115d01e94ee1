"""The tuner's grid: worker layouts (:class:`GridPoint`), this machine's default axes, every combination of
the axes, and the points kept within a time budget (the middle of the grid first)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from sfx.errors import ConfigError

GRID_FLAGS = ("num_workers", "num_envs_per_worker", "worker_num_splits", "env_backend")
DEFAULT_ENVS_PER_WORKER = (4, 8, 16, 32)
DEFAULT_SPLITS = (1, 2)
MAX_DEFAULT_WORKERS = 64
# a Python env with its wrappers and its share of the trajectory slots; an Atari or Doom env is about this, a
# classic-control one far less. Only the default grid's ceiling reads it (--env_memory_mb).
DEFAULT_ENV_MEMORY_MB = 64.0
MEMORY_FRACTION = 0.5  # of the available memory the default grid may fill: the machine keeps running


def _s(n: int) -> str:
    return "" if n == 1 else "s"


@dataclass(frozen=True)
class GridPoint:
    """One layout of the grid; ``env_backend`` is None for a family without ``--env_backend``."""

    num_workers: int
    num_envs_per_worker: int
    worker_num_splits: int
    env_backend: str | None = None

    def flags(self) -> list[str]:
        """The point as ``sfx.train`` flags."""
        out = [f"--num_workers={self.num_workers}", f"--num_envs_per_worker={self.num_envs_per_worker}",
               f"--worker_num_splits={self.worker_num_splits}"]
        return out + ([f"--env_backend={self.env_backend}"] if self.env_backend is not None else [])

    def label(self) -> str:
        text = (f"{self.num_workers} worker{_s(self.num_workers)} x {self.num_envs_per_worker} env{_s(self.num_envs_per_worker)} x "
                f"{self.worker_num_splits} split{_s(self.worker_num_splits)}")
        return text + (f", {self.env_backend}" if self.env_backend is not None else "")

    def short(self) -> str:
        """``2x16x2`` (workers x envs per worker x splits), with the backend after a slash."""
        text = f"{self.num_workers}x{self.num_envs_per_worker}x{self.worker_num_splits}"
        return text + (f"/{self.env_backend}" if self.env_backend is not None else "")

    @property
    def total_envs(self) -> int:
        return self.num_workers * self.num_envs_per_worker


@dataclass(frozen=True)
class Skipped:
    """A point left out, and why (memory, an invalid combination of defaults, the time budget)."""

    point: GridPoint
    reason: str


def machine_axes(cores: int, available_mb: float, env_memory_mb: float = DEFAULT_ENV_MEMORY_MB,
                 backends: Sequence[str] | None = None) -> dict[str, list]:
    """The default grid's axes for a machine with ``cores`` CPU cores and ``available_mb`` of free memory.

    Workers: {cores/2, cores, 2 x cores} (at most :data:`MAX_DEFAULT_WORKERS`); envs per worker:
    {4, 8, 16, 32} without those that would not fit in :data:`MEMORY_FRACTION` of the memory even with the
    fewest workers (always at least the smallest); splits: {1, 2}; backends: as given (None: the family has
    no ``--env_backend``). Larger layouts that do not fit are dropped point by point by :func:`build_grid`.
    """
    workers = sorted({min(max(1, w), MAX_DEFAULT_WORKERS) for w in (cores // 2, cores, 2 * cores)})
    max_envs = max_total_envs(available_mb, env_memory_mb)
    envs = [e for e in DEFAULT_ENVS_PER_WORKER if e * workers[0] <= max_envs] or [DEFAULT_ENVS_PER_WORKER[0]]
    return {"num_workers": workers, "num_envs_per_worker": envs, "worker_num_splits": list(DEFAULT_SPLITS),
            "env_backend": list(backends) if backends else [None]}


def max_total_envs(available_mb: float, env_memory_mb: float) -> int:
    """How many envs (over all workers) the default grid may make: a share of the memory over each env's."""
    return max(1, int(available_mb * MEMORY_FRACTION // max(env_memory_mb, 1e-9)))


def build_grid(axes: dict[str, list], explicit: Iterable[str] = (), max_envs: int | None = None
               ) -> tuple[list[GridPoint], list[Skipped]]:
    """Every combination of ``axes`` (workers, envs per worker, splits, backend), in that order.

    A combination whose envs per worker are not a multiple of its splits is invalid: a ConfigError when the
    command line named both values (``explicit`` holds the axes it named), else the point is skipped. With
    ``max_envs``, points of more envs in all that come only from default axes are skipped (memory). Raises
    ConfigError when nothing is left.
    """
    explicit = set(explicit)
    points: list[GridPoint] = []
    skipped: list[Skipped] = []
    for w in axes["num_workers"]:
        for e in axes["num_envs_per_worker"]:
            for s in axes["worker_num_splits"]:
                for b in axes["env_backend"]:
                    point = GridPoint(w, e, s, b)
                    if e % s != 0:
                        if {"num_envs_per_worker", "worker_num_splits"} <= explicit:
                            allowed = ", ".join(str(d) for d in range(1, e + 1) if e % d == 0)
                            raise ConfigError(f"--num_envs_per_worker={e} is not a multiple of --worker_num_splits={s} "
                                              f"(every grid point needs one); with {e} envs per worker "
                                              f"--worker_num_splits may be {allowed}")
                        skipped.append(Skipped(point, f"{e} envs per worker do not split in {s}"))
                        continue
                    if max_envs is not None and point.total_envs > max_envs and \
                            not {"num_workers", "num_envs_per_worker"} & explicit:
                        skipped.append(Skipped(point, f"{point.total_envs} envs would not fit in memory "
                                                      f"(at most {max_envs} here; --env_memory_mb)"))
                        continue
                    points.append(point)
    if not points:
        why = "; ".join(sorted({s.reason for s in skipped})) or "an axis has no value"
        raise ConfigError(f"the grid is empty ({why}): give --num_workers, --num_envs_per_worker and "
                          f"--worker_num_splits values whose envs per worker are multiples of the splits")
    return points, skipped


def point_priority(point: GridPoint, axes: dict[str, list]) -> tuple:
    """Sort key of :func:`prune_grid`: the middle of the grid first (in octaves of workers and of envs per
    worker from the middle values), then the split count and backend in the order their axes list them."""
    def octaves(value: int, values: list) -> float:
        ordered = sorted(values)
        middle = ordered[len(ordered) // 2]
        return abs(math.log2(value / middle))

    return (octaves(point.num_workers, axes["num_workers"])
            + octaves(point.num_envs_per_worker, axes["num_envs_per_worker"]),
            axes["worker_num_splits"].index(point.worker_num_splits), axes["env_backend"].index(point.env_backend))


def prune_grid(points: list[GridPoint], budget_sec: float, point_sec: float,
               priority: Callable[[GridPoint], Any] | None = None) -> tuple[list[GridPoint], list[Skipped]]:
    """The points that fit in ``budget_sec`` at ``point_sec`` each, chosen by ``priority`` (smallest first;
    default: the grid's order), returned in that priority order (the order to measure them in), and the
    others as skipped. At least one point is kept, whatever the budget."""
    order = sorted(points, key=priority) if priority is not None else list(points)
    fits = max(1, int(budget_sec // point_sec)) if point_sec > 0 else len(order)
    kept, dropped = order[:fits], order[fits:]
    reason = f"over the --max_minutes budget ({len(kept)} points of about {point_sec:.0f} s fit)"
    return kept, [Skipped(p, reason) for p in dropped]


def this_machine() -> dict:
    """``{'cores', 'available_mb'}``: the cores this process may run on and the free memory."""
    import psutil

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return {"cores": cores, "available_mb": psutil.virtual_memory().available / 2 ** 20}
