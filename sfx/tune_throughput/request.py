"""The tuner's command line: its own flags, the grid axes, and the ``sfx.train`` flags it passes on, checked as
a training command line with each point; the plan (:class:`TuneRequest`: the points to measure, in order, and
those skipped)."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Sequence

from sfx.errors import ConfigError
from sfx.tune_throughput.grid import (DEFAULT_ENV_MEMORY_MB, GRID_FLAGS, GridPoint, Skipped, build_grid,
                                     machine_axes, max_total_envs, point_priority, prune_grid, this_machine)

PROG = "python -m sfx.tune_throughput"
# what one point costs beyond its measured seconds (imports, forkserver, making the envs), for planning only;
# measured here: 10 s for gym_CartPole-v1 2 x 8 on 2 busy cores
SAMPLER_STARTUP_SEC = 12.0
TRAIN_STARTUP_SEC = 20.0


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
    machine = machine or this_machine()
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
