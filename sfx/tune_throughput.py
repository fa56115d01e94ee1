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
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import logging
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from sfx.errors import ConfigError

PROG = "python -m sfx.tune_throughput"
GRID_FLAGS = ("num_workers", "num_envs_per_worker", "worker_num_splits", "env_backend")
DEFAULT_ENVS_PER_WORKER = (4, 8, 16, 32)
DEFAULT_SPLITS = (1, 2)
MAX_DEFAULT_WORKERS = 64
# a Python env with its wrappers and its share of the trajectory slots; an Atari or Doom env is about this, a
# classic-control one far less. Only the default grid's ceiling reads it (--env_memory_mb).
DEFAULT_ENV_MEMORY_MB = 64.0
MEMORY_FRACTION = 0.5  # of the available memory the default grid may fill: the machine keeps running
# what one point costs beyond its measured seconds (imports, forkserver, making the envs), for planning only;
# measured here: 10 s for gym_CartPole-v1 2 x 8 on 2 busy cores
SAMPLER_STARTUP_SEC = 12.0
TRAIN_STARTUP_SEC = 20.0
STOP_GRACE_SEC = 15.0  # after SIGTERM a point stops its workers and exits; then the process group is killed
EXIT_CODES = {"done": 0, "failed": 1, "interrupted": 130}
CHILD_CODE = "import sys; from sfx.tune_throughput import child_main; sys.exit(child_main(sys.argv[1:]))"


# ------------------------------------------------------------------------------------------ the grid

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


# ------------------------------------------------------------------------------------------ the command line

@dataclass
class TuneRequest:
    """A parsed ``python -m sfx.tune_throughput`` command line."""

    env: str
    passthrough: list[str]          # the sfx.train flags, grid flags removed, as given
    axes: dict[str, list]
    explicit_axes: set[str]
    seconds: float
    max_minutes: float
    train: bool
    train_top: int
    train_seconds: float
    point_timeout_sec: float
    env_memory_mb: float
    out: str | None
    points: list[GridPoint] = field(default_factory=list)      # to measure, in measuring order
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)             # what the grid left out as a whole (a backend)


class _Refusing(argparse.ArgumentParser):
    """A parser whose errors are one ConfigError line (the entry point prints it), not usage and exit."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(message)


def tuner_parser() -> argparse.ArgumentParser:
    """The tuner's own flags and the grid axes (comma-separated values); everything else is sfx.train's."""
    p = _Refusing(prog=PROG, allow_abbrev=False,
                  description="Try a grid of worker layouts with the dummy sampler (and, with --train, short "
                              "trainings) and print the fastest sfx.train command line.",
                  epilog="Every other flag is sfx.train's (python -m sfx.train --env=ENV --help lists them), checked "
                         "as a training command line, passed to each point and kept in the printed line.")
    g = p.add_argument_group("grid (comma-separated values; left out: this machine's default)")
    for name in GRID_FLAGS:
        g.add_argument(f"--{name}", default=None, metavar="V[,V...]")
    t = p.add_argument_group("tuner")
    t.add_argument("--seconds", type=float, default=5.0, help="sampling time per point (env creation excluded)")
    t.add_argument("--max_minutes", type=float, default=10.0, help="budget of the whole run; the grid is pruned to fit")
    t.add_argument("--train", default="False", metavar="BOOL",
                   help="also train the best --train_top sampler points for --train_seconds; the fastest training wins")
    t.add_argument("--train_top", type=int, default=3, help="sampler points trained with --train")
    t.add_argument("--train_seconds", type=float, default=30.0,
                   help="--train_for_seconds of each training with --train (its startup counts in it: the FPS is "
                        "measured from its first env steps)")
    t.add_argument("--point_timeout_sec", type=float, default=None,
                   help="wall-clock limit of one point, startup included (default: its seconds + 180)")
    t.add_argument("--env_memory_mb", type=float, default=DEFAULT_ENV_MEMORY_MB,
                   help="memory one env takes, for the default grid's ceiling on envs")
    t.add_argument("--out", default=None, help="write the results as JSON to this file")
    return p


def _bool(flag: str, text: str) -> bool:
    from sfx.cfg import str2bool

    try:
        return str2bool(text)
    except (argparse.ArgumentTypeError, ValueError):
        raise ConfigError(f"--{flag}={text} must be a boolean (True or False)") from None


def _axis_values(name: str, text: str, choices: Sequence[str] | None) -> list:
    values = [v.strip() for v in text.split(",")]
    if not text.strip() or any(v == "" for v in values):
        raise ConfigError(f"--{name}={text} has an empty value: give comma-separated values, e.g. --{name}=2,4")
    if name == "env_backend":
        bad = [v for v in values if choices is not None and v not in choices]
        if choices is None:
            raise ConfigError("--env_backend is not a flag of this env's family (it has one backend): leave it out")
        if bad:
            raise ConfigError(f"--env_backend={bad[0]} is not a backend of this env; allowed: {', '.join(choices)}")
        return list(dict.fromkeys(values))
    out = []
    for v in values:
        try:
            n = int(v)
        except ValueError:
            n = 0
        if n <= 0 or str(n) != v.lstrip("+"):
            raise ConfigError(f"--{name}={text}: {v!r} is not a positive integer (each grid value must be one)")
        out.append(n)
    return list(dict.fromkeys(out))


def _family_backends(env: str) -> tuple[str, ...] | None:
    """The choices of the env family's ``--env_backend``, or None when it has no such flag."""
    from sfx.registries import build_parser

    for action in build_parser(env)._actions:
        if action.dest == "env_backend":
            return tuple(action.choices)
    return None


def _available_backends(backends: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(usable here, notes on the others): EnvPool's backend needs its package."""
    usable, notes = [], []
    for b in backends:
        if b == "envpool" and importlib.util.find_spec("envpool") is None:
            notes.append("--env_backend=envpool: envpool is not installed (pip install -e .[envpool])")
        else:
            usable.append(b)
    return usable, notes


def _machine() -> dict:
    import psutil

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return {"cores": cores, "available_mb": psutil.virtual_memory().available / 2 ** 20}


def parse_tune_args(argv: Sequence[str] | None = None, machine: dict | None = None) -> TuneRequest:
    """Parse and check a tuner command line, and plan its grid (pruned to ``--max_minutes``).

    The remaining flags are checked as an ``sfx.train`` command line with each grid point (an unknown flag, a
    bad value: one ConfigError). ``machine`` (``{'cores', 'available_mb'}``) defaults to this machine's.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    ns, rest = tuner_parser().parse_known_args(argv)
    ns.train = _bool("train", ns.train)
    for flag in ("seconds", "max_minutes", "train_seconds", "env_memory_mb"):
        if not getattr(ns, flag) > 0:
            raise ConfigError(f"--{flag}={getattr(ns, flag)} must be > 0")
    if ns.train_top < 1:
        raise ConfigError(f"--train_top={ns.train_top} must be >= 1")
    if ns.point_timeout_sec is not None and ns.point_timeout_sec <= 0:
        raise ConfigError(f"--point_timeout_sec={ns.point_timeout_sec} must be > 0")
    if not any(a == "--env" or a.startswith("--env=") for a in rest):
        from sfx.envs.registry import registered_prefixes

        raise ConfigError(f"--env is required, e.g. --env=gym_CartPole-v1 (env families: "
                          f"{', '.join(registered_prefixes())})")
    env = _pre_env(rest)
    for flag in ("timeout_seconds", "sample_env_frames"):
        if any(a == f"--{flag}" or a.startswith(f"--{flag}=") for a in rest):
            raise ConfigError(f"--{flag} is the dummy sampler's; the tuner sets the sampling time with --seconds")
    machine = machine or _machine()
    choices = _family_backends(env)
    explicit = {name for name in GRID_FLAGS if getattr(ns, name) is not None}
    backends, notes = None, []
    if choices is not None:
        backends, notes = _available_backends(choices) if "env_backend" not in explicit else (list(choices), [])
        if not backends:
            raise ConfigError(f"the grid is empty: {'; '.join(notes)}")
    axes = machine_axes(machine["cores"], machine["available_mb"], ns.env_memory_mb, backends)
    for name in explicit:
        axes[name] = _axis_values(name, getattr(ns, name), choices)
    max_envs = max_total_envs(machine["available_mb"], ns.env_memory_mb)
    points, skipped = build_grid(axes, explicit, max_envs)

    passthrough = list(rest)
    _check_training_line(passthrough, points, explicit, skipped)
    if not points:
        raise ConfigError(f"the grid is empty: {skipped[-1].reason}")

    point_sec = ns.seconds + SAMPLER_STARTUP_SEC
    train_sec = ns.train_top * (ns.train_seconds + TRAIN_STARTUP_SEC) if ns.train else 0.0
    budget = ns.max_minutes * 60 - train_sec
    kept, over = prune_grid(points, budget, point_sec, lambda p: point_priority(p, axes))
    # the longest a point may take, startup included: a point stuck making its envs is killed after this
    timeout = ns.point_timeout_sec or max(ns.seconds, ns.train_seconds if ns.train else 0.0) + 180.0
    return TuneRequest(env=env, passthrough=passthrough, axes=axes, explicit_axes=explicit, seconds=ns.seconds,
                       max_minutes=ns.max_minutes, train=ns.train, train_top=ns.train_top,
                       train_seconds=ns.train_seconds, point_timeout_sec=timeout, env_memory_mb=ns.env_memory_mb,
                       out=ns.out, points=kept, skipped=skipped + over, notes=notes)


def _pre_env(argv: list[str]) -> str:
    pre = _Refusing(add_help=False, allow_abbrev=False)
    pre.add_argument("--env", default=None)
    return pre.parse_known_args(argv)[0].env


def _check_training_line(passthrough: list[str], points: list[GridPoint], explicit: set[str],
                         skipped: list[Skipped]) -> None:
    """Each point with the passthrough flags must be a valid training command line (sfx's own parser and
    checks, no saved cfg read, nothing written). An unknown flag, or an error every point shares, is the
    passthrough's: raised as it is. Otherwise a point that fails through default axes alone is skipped (into
    ``skipped``, removed from ``points``), and one with an axis from the command line names the point."""
    from sfx.agents import find_agent
    from sfx.train import requested_algo

    algo = requested_algo(passthrough)
    if algo and find_agent(algo).entry_point:
        raise ConfigError(f"--algo={algo} does not train; the tuner measures with the dummy sampler itself and "
                          f"prints a training command line")
    failures: dict[GridPoint, ConfigError] = {}
    # the checks' warnings (a split count fitted, uneven tasks) would come once per point: each point's own log
    # has them when it runs
    logging.disable(logging.WARNING)
    try:
        _parse_points(passthrough, points, failures)
    finally:
        logging.disable(logging.NOTSET)
    if not failures:
        return
    if len(failures) == len(points) and len({str(e) for e in failures.values()}) == 1:
        raise next(iter(failures.values()))
    for point, e in failures.items():
        if explicit:
            raise ConfigError(f"grid point {point.label()}: {e}") from None
        points.remove(point)
        skipped.append(Skipped(point, str(e)))


def _parse_points(passthrough: list[str], points: list[GridPoint], failures: dict) -> None:
    from sfx.registries import parse_args
    from sfx.cfg.parsing import UnknownFlagError

    with tempfile.TemporaryDirectory(prefix="sfx_tune_check_") as tmp:
        here = [f"--train_dir={tmp}", "--experiment=check"]
        for point in points:
            try:
                parse_args(passthrough + point.flags() + here, resume=False)
            except UnknownFlagError:
                raise
            except ConfigError as e:
                failures[point] = e


# ------------------------------------------------------------------------------------------ measuring

@dataclass
class PointResult:
    """What one point measured: ``status`` ok | failed | timeout; FPS are env frames per second (sampler:
    over its sampling time, env creation excluded; train: from its first env steps to its end)."""

    point: GridPoint
    mode: str                       # sampler | train
    status: str
    fps: float | None = None
    wall_sec: float = 0.0
    error: str | None = None
    log: str | None = None


def point_argv(request: TuneRequest, point: GridPoint, mode: str, train_dir: Path, name: str) -> list[str]:
    """The child's command line: the passthrough flags, the point, the time limit, a folder of the tuner's own
    (appended last, so they win over the passthrough's --train_dir / --experiment)."""
    if mode == "sampler":
        timing = [f"--timeout_seconds={request.seconds:g}"]
    else:
        # status lines each second: the training's FPS is read off status.json (see _train_point)
        timing = [f"--train_for_seconds={request.train_seconds:g}", "--report_every_sec=1"]
    return [*request.passthrough, *point.flags(), *timing, f"--train_dir={train_dir}", f"--experiment={name}"]


def child_main(args: list[str]) -> int:
    """Inside a point's child process: ``MODE RESULT_JSON ARGV...``; writes ``{'status', 'fps', 'error'}`` (and
    for a training ``session_fps``, the figure startup included)."""
    mode, result_path, argv = args[0], Path(args[1]), args[2:]
    try:
        if mode == "sampler":
            from sfx.dummy_sampler import parse_sampler_args, run_sampler

            result = run_sampler(parse_sampler_args(argv))
            out = {"status": result["status"], "fps": result["fps"], "error": None}
        else:
            out = _train_point(argv)
    except ConfigError as e:
        out = {"status": "failed", "fps": None, "error": str(e)}
    result_path.write_text(json.dumps(out))
    return 0 if out["status"] == "done" else 1


def _train_point(argv: list[str]) -> dict:
    """A short training, its FPS from its first env steps to its end: a few seconds of a short run go to
    starting processes and making envs, more for larger layouts, and the session's FPS would count them.
    The first steps are read off status.json (written every --report_every_sec, 1 s here), the end off its
    last write."""
    import threading

    from sfx.engine import run_training
    from sfx.experiment import status_path
    from sfx.train import parse_for_training

    cfg = parse_for_training(argv)
    path = status_path(cfg)
    first: dict = {}
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2) and not first:
            status = _read_json(path)
            if status and status.get("env_steps", 0) > 0:
                first.update(status)

    watcher = threading.Thread(target=watch, name="tune-status", daemon=True)
    watcher.start()
    try:
        result = run_training(cfg)
    finally:
        done.set()
        watcher.join()
    last = _read_json(path) or {}
    fps = result["fps"]
    if first and last.get("updated", 0) > first["updated"] and last.get("env_steps", 0) > first["env_steps"]:
        fps = (last["env_steps"] - first["env_steps"]) / (last["updated"] - first["updated"])
    return {"status": result["status"], "fps": fps, "session_fps": result["fps"], "error": None}


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _last_line(log_path: Path) -> str | None:
    try:
        lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    return lines[-1][-300:] if lines else None


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the point's main process (sfx stops its workers and exits), then SIGKILL to its process
    group (the workers it started) if anything is left."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STOP_GRACE_SEC)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run_point(request: TuneRequest, point: GridPoint, mode: str, work_dir: Path, name: str) -> PointResult:
    """Measure one point in a fresh child process of its own process group; a crash, a refusal or a point past
    ``--point_timeout_sec`` is a result (status failed / timeout), not an exception."""
    log_path = work_dir / f"{name}.log"
    result_path = work_dir / f"{name}.json"
    argv = point_argv(request, point, mode, work_dir / "train_dir", name)
    start = time.monotonic()
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen([sys.executable, "-c", CHILD_CODE, mode, str(result_path), *argv],
                                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=request.point_timeout_sec)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        except KeyboardInterrupt:
            _stop_group(proc)
            raise
        if timed_out:
            _stop_group(proc)
        else:
            try:  # workers left behind by a crashed coordinator
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    wall = time.monotonic() - start
    if timed_out:
        return PointResult(point, mode, "timeout", wall_sec=wall, log=str(log_path),
                           error=f"killed after {request.point_timeout_sec:.0f} s (--point_timeout_sec)")
    try:
        out = json.loads(result_path.read_text())
    except (OSError, json.JSONDecodeError):
        return PointResult(point, mode, "failed", wall_sec=wall, log=str(log_path),
                           error=f"exit code {proc.returncode}: {_last_line(log_path) or 'no output'}")
    if out["status"] == "done" and out["fps"] == 0:
        limit = f"--train_seconds={request.train_seconds:g}" if mode == "train" else f"--seconds={request.seconds:g}"
        return PointResult(point, mode, "failed", wall_sec=wall, log=str(log_path),
                           error=f"no env steps within {limit} (startup counts in a training's time): give it more")
    if out["status"] != "done" or not out["fps"] or not math.isfinite(out["fps"]):
        return PointResult(point, mode, "failed", wall_sec=wall, log=str(log_path),
                           error=out["error"] or f"{out['status']}: {_last_line(log_path) or 'no output'}")
    return PointResult(point, mode, "ok", fps=float(out["fps"]), wall_sec=wall, log=str(log_path))


@dataclass
class TuneReport:
    """A tuner run: each point's sampler (and training) result, what was skipped, the winner."""

    request: TuneRequest
    machine: dict
    sampler: list[PointResult]
    train: list[PointResult]
    skipped: list[Skipped]
    started: str
    elapsed_sec: float
    interrupted: bool = False

    @property
    def best(self) -> PointResult | None:
        """The fastest training with --train (else, when no training ran, the fastest sampler point)."""
        for results in (self.train, self.sampler):
            ok = [r for r in results if r.status == "ok"]
            if ok:
                return max(ok, key=lambda r: r.fps)
        return None

    def command(self) -> str | None:
        """The fastest point as one ``python -m sfx.train`` line: the passthrough flags and the point's."""
        best = self.best
        if best is None:
            return None
        return " ".join(["python", "-m", "sfx.train",
                         *(shlex.quote(a) for a in best_argv(self.request.passthrough, best.point))])

    def to_json(self) -> dict:
        def point(p: GridPoint) -> dict:
            return dataclasses.asdict(p)

        def result(r: PointResult) -> dict:
            return {**point(r.point), "mode": r.mode, "status": r.status, "fps": r.fps,
                    "wall_sec": round(r.wall_sec, 2), "error": r.error}

        best = self.best
        return {"env": self.request.env, "started": self.started, "elapsed_sec": round(self.elapsed_sec, 1),
                "machine": self.machine, "seconds": self.request.seconds, "train": self.request.train,
                "train_seconds": self.request.train_seconds if self.request.train else None,
                "passthrough": self.request.passthrough, "interrupted": self.interrupted,
                "sampler": [result(r) for r in self.sampler], "training": [result(r) for r in self.train],
                "skipped": [{**point(s.point), "reason": s.reason} for s in self.skipped],
                "notes": self.request.notes,
                "best": None if best is None else {**point(best.point), "mode": best.mode, "fps": best.fps,
                                                   "command": self.command()}}


def best_argv(passthrough: list[str], point: GridPoint) -> list[str]:
    """``sfx.train``'s argv for ``point``: the passthrough flags, then the point's (placed last, so they are
    the ones that count)."""
    return [*passthrough, *point.flags()]


def tune(request: TuneRequest, progress: Callable[[str], None] = print, work_root: str | None = None) -> TuneReport:
    """Measure the planned points (sampler, then with ``train`` the best ``train_top`` of them trained) within
    ``max_minutes``; points that would start past it are skipped. Ctrl+C ends it with what was measured.
    The points' folders go to a new temporary folder (in ``work_root`` if given), kept only for the logs of
    points that did not finish."""
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    t0 = time.monotonic()
    deadline = t0 + request.max_minutes * 60
    work_dir = Path(tempfile.mkdtemp(prefix="sfx_tune_", dir=work_root))
    sampler: list[PointResult] = []
    trained: list[PointResult] = []
    skipped = list(request.skipped)
    interrupted = False
    try:
        n = len(request.points)
        for i, point in enumerate(request.points):
            reserve = request.train_top * (request.train_seconds + TRAIN_STARTUP_SEC) if request.train else 0.0
            if time.monotonic() + request.seconds + reserve > deadline:
                skipped += [Skipped(p, "the --max_minutes budget was spent") for p in request.points[i:]]
                break
            r = run_point(request, point, "sampler", work_dir, f"sampler_{i}")
            sampler.append(r)
            progress(f"[{i + 1}/{n}] {point.label()}: " + (f"{r.fps:,.0f} FPS" if r.status == "ok" else
                                                           f"{r.status}: {r.error}") + f" ({r.wall_sec:.0f} s)")
        if request.train:
            ok = sorted((r for r in sampler if r.status == "ok"), key=lambda r: -r.fps)[:request.train_top]
            for i, best in enumerate(ok):
                if time.monotonic() + request.train_seconds > deadline:
                    skipped += [Skipped(r.point, "training: the --max_minutes budget was spent") for r in ok[i:]]
                    break
                r = run_point(request, best.point, "train", work_dir, f"train_{i}")
                trained.append(r)
                progress(f"[train {i + 1}/{len(ok)}] {best.point.label()}: " +
                         (f"{r.fps:,.0f} FPS" if r.status == "ok" else f"{r.status}: {r.error}") +
                         f" ({r.wall_sec:.0f} s)")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        failed = [r for r in sampler + trained if r.status != "ok"]
        if failed:
            progress(f"logs of the points that did not finish: {work_dir}")
            shutil.rmtree(work_dir / "train_dir", ignore_errors=True)
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
    return TuneReport(request, _machine(), sampler, trained, skipped, started, time.monotonic() - t0, interrupted)


# ------------------------------------------------------------------------------------------ the report

def format_report(report: TuneReport) -> str:
    """The table of points (grid order), what was skipped, and the fastest command line."""
    req = report.request
    by_point = {r.point: r for r in report.sampler}
    trained = {r.point: r for r in report.train}
    ok = [r.fps for r in report.sampler if r.status == "ok"]
    best_sampler = max(ok) if ok else None
    with_backend = any(p.env_backend is not None for p in by_point)
    head = ["workers", "envs/worker", "splits"] + (["backend"] if with_backend else []) + \
        ["sampler FPS", "vs best"] + (["train FPS"] if req.train else []) + ["note"]
    rows = []
    order = sorted(by_point, key=lambda p: (p.num_workers, p.num_envs_per_worker, p.worker_num_splits,
                                            str(p.env_backend)))
    best = report.best
    for p in order:
        r = by_point[p]
        row = [str(p.num_workers), str(p.num_envs_per_worker), str(p.worker_num_splits)]
        row += [str(p.env_backend)] if with_backend else []
        row += [f"{r.fps:,.0f}", f"{r.fps / best_sampler:.2f}"] if r.status == "ok" else ["-", "-"]
        if req.train:
            t = trained.get(p)
            row.append("-" if t is None else f"{t.fps:,.0f}" if t.status == "ok" else t.status)
        notes = []
        if r.status != "ok":
            notes.append(f"{r.status}: {r.error}")
        t = trained.get(p)
        if t is not None and t.status != "ok":
            notes.append(f"training {t.status}: {t.error}")
        if best is not None and best.point == p:
            notes.insert(0, "fastest")
        row.append("; ".join(notes))
        rows.append(row)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i < len(cells) - 1 else c for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    cores, mem = report.machine["cores"], report.machine["available_mb"]
    out = [f"sfx.tune_throughput: {req.env}, {len(report.sampler)} points x {req.seconds:g} s of sampling"
           + (f", the best {req.train_top} trained for {req.train_seconds:g} s" if req.train else "")
           + f" on {cores} cores ({mem / 1024:.1f} GiB free), {report.started}, {report.elapsed_sec / 60:.1f} min",
           "", line(head), line(["-" * w for w in widths]), *(line(r) for r in rows)]
    if report.skipped or req.notes:
        out += ["", f"skipped ({len(report.skipped)} points, as workers x envs x splits):"]
        out += [f"  {note}" for note in req.notes]
        by_reason: dict[str, list[str]] = {}
        for s in report.skipped:
            by_reason.setdefault(s.reason, []).append(s.point.short())
        out += [f"  {reason}: {', '.join(points)}" for reason, points in by_reason.items()]
    if report.interrupted:
        out += ["", "interrupted: the table has what was measured"]
    command = report.command()
    out.append("")
    if command is None or best is None:
        out.append("no point finished: see the notes above")
    else:
        if best.mode == "train":
            kind = "training"
        elif req.train:
            kind = "dummy sampler; no training finished"
        else:
            kind = "dummy sampler"
        out += [f"fastest ({kind}, {best.fps:,.0f} FPS):", command]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """The command line: parse, plan, measure, print (and write ``--out``)."""
    try:
        request = parse_tune_args(argv)
    except ConfigError as e:
        print(f"sfx: error: {e}", file=sys.stderr)
        return 2
    print(f"sfx.tune_throughput: {len(request.points)} points to measure"
          f"{f', {len(request.skipped)} skipped' if request.skipped else ''}", flush=True)
    report = tune(request, progress=lambda s: print(s, flush=True))
    print(format_report(report), flush=True)
    if request.out:
        Path(request.out).write_text(json.dumps(report.to_json(), indent=2))
        print(f"results: {request.out}")
    if report.interrupted:
        return EXIT_CODES["interrupted"]
    return EXIT_CODES["done"] if report.best is not None else EXIT_CODES["failed"]


if __name__ == "__main__":
    sys.exit(main())
