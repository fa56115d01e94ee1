"""``python -m sfx.train --env=... --experiment=...``: train an agent (asynchronous APPO).

Run with ``--help`` for every flag and its default. An existing experiment folder is resumed
(``--restart_behavior=restart|overwrite``: started afresh instead, keeping the old folder under a new
name or deleting it, as Sample Factory 2 does).
``--algo`` picks the learning algorithm (an agent of :mod:`sfx.agents`; APPO by default);
``--algo=DUMMY_SAMPLER`` runs :mod:`sfx.dummy_sampler` instead (sampling with random actions, no training).
"""

from __future__ import annotations

import argparse
import importlib
import multiprocessing
import shutil
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sfx.pbt  # noqa: F401 - registers population-based training as a coordinator observer
from sfx.agents import find_agent
from sfx.cfg import ConfigError
from sfx.registries import algo_name, parse_args
from sfx.cfg.api_terms import in_python_terms
from sfx.cfg.cfg_json import flags_to_argv
from sfx.engine import run_training

# 75 (EX_TEMPFAIL): another rank of a multi-rank training died, hung or was killed; this rank stopped with
# rank 0's last checkpoint kept. Starting the same command again (every rank) resumes: the runner's
# torchrun restarts and Slurm requeues do that.
EXIT_CODES = {"done": 0, "failed": 1, "interrupted": 130, "rank_lost": 75}


def requested_algo(argv: list[str]) -> str | None:
    """The ``--algo`` on the command line as registered, if any (before the full parse, which may resume a
    saved cfg)."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--algo", default=None)
    algo = pre.parse_known_args(argv)[0].algo
    return None if algo is None else algo_name(algo)  # `appo` is APPO; a near miss gets a "did you mean"


def requested_restart_behavior(argv: list[str]) -> str:
    """``--restart_behavior`` on the command line (the parser checks its value), else ``resume``."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--restart_behavior", default="resume")
    return pre.parse_known_args(argv)[0].restart_behavior


def parse_for_training(argv: list[str]) -> Any:
    """The training cfg of ``argv``. With ``--restart_behavior=restart|overwrite`` an existing experiment
    folder is not resumed: the command line alone is parsed and validated, then the old folder is moved
    to ``<experiment>_old_<time>`` (restart) or deleted (overwrite). A run without ``--seed`` (and no saved
    one) gets a random seed here, which cfg.json records: the run can be repeated with it."""
    cfg = _parse_for_training(argv)
    if cfg.seed is None:
        from sfx.experiment.provenance import new_seed

        cfg.seed = new_seed()
    return cfg


def _parse_for_training(argv: list[str]) -> Any:
    behavior = requested_restart_behavior(argv)
    if behavior == "resume":
        return parse_args(argv)
    cfg = parse_args(argv, resume=False)
    from sfx.experiment import experiment_dir

    folder = experiment_dir(cfg)
    if folder.exists():
        if cfg.restart_behavior == "restart":
            kept = folder.with_name(f"{folder.name}_old_{time.strftime('%Y%m%d_%H%M%S')}")
            folder.rename(kept)
            print(f"sfx: --restart_behavior=restart: the old experiment is kept in {kept}", file=sys.stderr)
        else:
            shutil.rmtree(folder)
            print(f"sfx: --restart_behavior=overwrite: deleted the old experiment {folder}", file=sys.stderr)
    return cfg


def refuse_in_worker_start(what: str) -> None:
    """A worker process imports the main module again while it starts (multiprocessing's spawn and
    forkserver): a training started at a script's top level would start once more in every worker.
    Raises one ConfigError there (the child ends; the run reports the worker's death and this line)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise ConfigError(f"{what} was called while an sfx worker process was starting, i.e. at the top level of "
                          f"the main module, which every worker imports again: put the call under "
                          f"`if __name__ == \"__main__\":`")


def main(argv: list[str] | None = None) -> int:
    refuse_in_worker_start("sfx.train.main()")
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        algo = requested_algo(argv)
        entry_point = find_agent(algo).entry_point if algo else None
        if entry_point:  # an agent that runs instead of a training (DUMMY_SAMPLER: the dummy sampler)
            module, _, function = entry_point.partition(":")
            return getattr(importlib.import_module(module), function)(argv)
        cfg = parse_for_training(argv)
        result = run_training(cfg)  # raises ConfigError before any worker starts, e.g. on bad checkpoints
    except ConfigError as e:
        print(f"sfx: error: {e}", file=sys.stderr)
        return 2
    return EXIT_CODES[result["status"]]


# ------------------------------------------------------------------ the Python API: sfx.train(...)

class TrainingFailed(RuntimeError):
    """A training started by :func:`train` ended as ``failed`` or ``rank_lost`` (its log says why)."""

    def __init__(self, message: str, result: "TrainResult") -> None:
        super().__init__(message)
        self.result = result


@dataclass
class TrainResult:
    """What :func:`train` returns."""

    status: str                     # done | interrupted
    # which rule ended it: train_for_env_steps | train_for_seconds | stop_at_reward | signal | another_rank
    # (sfx.engine.supervision.STOP_REASONS); stop_at_reward means the target was reached, whatever `reward` says
    stop_reason: str | None
    experiment_dir: Path            # train_dir/experiment
    env_steps: int                  # all policies' env steps (frames) at the end
    reward: float                   # policy 0's mean episode reward over its last --stats_avg episodes at the end
    checkpoint: Path | None         # policy 0's newest checkpoint
    cfg: Any = field(repr=False, default=None)     # the cfg it ran with
    stats: dict = field(repr=False, default_factory=dict)  # run_training's whole result (per policy: lists)


def train(env: str, experiment: str, **flags: Any) -> TrainResult:
    """Train as ``python -m sfx.train --env=ENV --experiment=EXPERIMENT --flag=value ...`` would: the same
    flags, defaults and validation (a bad value raises :class:`~sfx.errors.ConfigError`), the same resume of
    an existing experiment folder (``restart_behavior="restart"|"overwrite"`` to start afresh).

    Example::

        import sfx
        result = sfx.train(env="gym_CartPole-v1", experiment="cartpole", train_for_env_steps=100_000)
        print(result.reward, result.checkpoint)

    Returns a :class:`TrainResult`; raises :class:`TrainingFailed` when the run failed.
    """
    refuse_in_worker_start("sfx.train()")
    from sfx.experiment import checkpoint_dir, experiment_dir, list_checkpoints

    try:
        argv = [f"--env={env}", f"--experiment={experiment}", *flags_to_argv(flags)]
        if find_agent(requested_algo(argv) or "APPO").entry_point:
            raise ConfigError(f"--algo={requested_algo(argv)} does not train; run its own command instead")
        cfg = parse_for_training(argv)
        stats = run_training(cfg)
    except ConfigError as e:
        # one line in the caller's terms (keywords, not flags), without the parser's frames under it
        raise in_python_terms(e, "sfx.train", "python -m sfx.train") from None
    checkpoints = list_checkpoints(checkpoint_dir(cfg, 0))
    result = TrainResult(status=stats["status"], stop_reason=stats["stop_reason"],
                         experiment_dir=experiment_dir(cfg), env_steps=stats["env_steps"],
                         reward=stats["reward"][0], checkpoint=checkpoints[0] if checkpoints else None,
                         cfg=cfg, stats=stats)
    if stats["status"] in ("failed", "rank_lost"):
        raise TrainingFailed(f"training {stats['status']}: see {experiment_dir(cfg) / 'sf_log.txt'}", result)
    return result


class _CallableModule(types.ModuleType):
    """``sfx.train`` is this module (``python -m sfx.train``, ``from sfx.train import main``) and the function
    :func:`train`: importing the module puts it on the package as ``sfx.train``, so the module answers calls."""

    # train itself, not a method calling it: a ConfigError's traceback then shows the caller's line and
    # train's raise, one frame fewer
    __call__ = staticmethod(train)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["TrainResult", "TrainingFailed", "main", "run_training", "train"]

if __name__ == "__main__":
    sys.exit(main())
