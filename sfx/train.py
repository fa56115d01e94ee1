"""``python -m sfx.train --env=... --experiment=...``: train an agent (asynchronous APPO).

Run with ``--help`` for every flag and its default. An existing experiment folder is resumed.
``--algo`` picks the learning algorithm (an agent of :mod:`sfx.agents`; APPO by default);
``--algo=DUMMY_SAMPLER`` runs :mod:`sfx.dummy_sampler` instead (sampling with random actions, no training).
"""

from __future__ import annotations

import argparse
import importlib
import sys

import sfx.pbt  # noqa: F401 - registers population-based training as a coordinator observer
from sfx.agents import find_agent
from sfx.cfg import ConfigError, parse_args
from sfx.engine import run_training

# 75 (EX_TEMPFAIL): another rank of a multi-rank training died, hung or was killed; this rank stopped with
# rank 0's last checkpoint kept. Starting the same command again (every rank) resumes: the runner's
# torchrun restarts and Slurm requeues do that.
EXIT_CODES = {"done": 0, "failed": 1, "interrupted": 130, "rank_lost": 75}


def requested_algo(argv: list[str]) -> str | None:
    """The ``--algo`` on the command line, if any (before the full parse, which may resume a saved cfg)."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--algo", default=None)
    return pre.parse_known_args(argv)[0].algo


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        algo = requested_algo(argv)
        entry_point = find_agent(algo).entry_point if algo else None
        if entry_point:  # an agent that runs instead of a training (DUMMY_SAMPLER: the dummy sampler)
            module, _, function = entry_point.partition(":")
            return getattr(importlib.import_module(module), function)(argv)
        cfg = parse_args(argv)
        result = run_training(cfg)  # raises ConfigError before any worker starts, e.g. on bad checkpoints
    except ConfigError as e:
        print(f"sfx: error: {e}", file=sys.stderr)
        return 2
    return EXIT_CODES[result["status"]]


__all__ = ["main", "run_training"]

if __name__ == "__main__":
    sys.exit(main())
