"""``python -m sfx.tune_throughput --env=... [sfx.train flags]``: the fastest worker layout on this machine.

Tries a small grid of ``--num_workers`` x ``--num_envs_per_worker`` x ``--worker_num_splits`` (and, for env
families with ``--env_backend``, each backend) for ``--seconds`` each with the real dummy sampler
(:mod:`sfx.dummy_sampler`: training's own sampling path with random actions), each point in a fresh child
process, and prints a table and the fastest command line as one ``python -m sfx.train ...`` line.

- An axis given on the command line is the grid's along that axis: ``--num_workers=4`` pins it,
  ``--num_workers=2,4,8`` tries those. An axis left out gets this machine's default: workers in
  {cores/2, cores, 2 x cores}, envs per worker in {4, 8, 16, 32} (fewer when the envs would not fit in
  memory, ``--env_memory_mb`` each), splits in {1, 2}, every backend the family offers and this machine has.
- ``--max_minutes`` bounds the whole run: points are dropped before starting (those farthest from the middle
  of the grid first) and once the time is spent; the report names each one skipped and why.
- ``--train``: the best ``--train_top`` sampler points also train for ``--train_seconds`` (``sfx.train`` with
  ``--train_for_seconds``) and the fastest training wins. On a small machine training is learner-bound, and
  the best sampler layout is not always the best training layout.
- Every other flag is ``sfx.train``'s (the env family's included): it is checked as a training command line,
  passed to every point and kept in the printed line. ``--out=results.json`` saves the results.

Exit codes: 0 done, 1 no point ran, 2 bad command line (one line), 130 interrupted.

The package: :mod:`~sfx.tune_throughput.grid` (the layouts and the default axes), :mod:`~sfx.tune_throughput.request`
(the command line and the plan), :mod:`~sfx.tune_throughput.points` (measuring one point in a child process),
:mod:`~sfx.tune_throughput.report` (the results and the table), :mod:`~sfx.tune_throughput.cli` (the run).
"""

from sfx.tune_throughput.cli import EXIT_CODES, main, tune
from sfx.tune_throughput.grid import (DEFAULT_ENV_MEMORY_MB, DEFAULT_ENVS_PER_WORKER, DEFAULT_SPLITS, GRID_FLAGS,
                                     MAX_DEFAULT_WORKERS, MEMORY_FRACTION, GridPoint, Skipped, build_grid,
                                     machine_axes, max_total_envs, point_priority, prune_grid, this_machine)
from sfx.tune_throughput.points import PointResult, child_main, point_argv, run_point
from sfx.tune_throughput.report import TuneReport, best_argv, format_report
from sfx.tune_throughput.request import (PROG, SAMPLER_STARTUP_SEC, TRAIN_STARTUP_SEC, TuneRequest, parse_tune_args,
                                        tuner_parser)

__all__ = ["DEFAULT_ENV_MEMORY_MB", "DEFAULT_ENVS_PER_WORKER", "DEFAULT_SPLITS", "EXIT_CODES", "GRID_FLAGS",
           "MAX_DEFAULT_WORKERS", "MEMORY_FRACTION", "PROG", "SAMPLER_STARTUP_SEC", "TRAIN_STARTUP_SEC", "GridPoint",
           "PointResult", "Skipped", "TuneReport", "TuneRequest", "best_argv", "build_grid", "child_main",
           "format_report", "machine_axes", "main", "max_total_envs", "parse_tune_args", "point_argv",
           "point_priority", "prune_grid", "run_point", "this_machine", "tune", "tuner_parser"]
