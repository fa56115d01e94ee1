"""Sample Factory 2.x flags that sfx accepts, so that SF2 habits and command lines get an answer.

One ``--help`` group (:data:`SF2_GROUP`):

* ``--num_epochs`` is SF2's name of sfx's (and SF1's) ``--ppo_epochs``: it sets that flag.
* ``--restart_behavior=resume|restart|overwrite`` has SF2's meaning (what to do when the experiment
  folder exists): ``resume`` (the default) continues it, ``restart`` keeps the old folder under a new
  name (``<experiment>_old_<time>``) and starts afresh, ``overwrite`` deletes it and starts afresh.
  The folder is moved or deleted by the entry point (:func:`sfx.train.main`) after the command line
  is validated.
* ``--async_rl``, ``--batched_sampling``, ``--value_bootstrap`` are accepted at the values that
  describe what sfx always does; another value is a one-line error naming sfx's way to get it.

The launcher's ``--backend=processes`` is sfx.runner's ``--runner=processes``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from sfx.cfg.flag_types import AcceptOnly, str2bool

SF2_GROUP = "Sample Factory 2.x names and flags"
RESTART_BEHAVIORS = ("resume", "restart", "overwrite")


class Sf2Alias(argparse.Action):
    """An SF2 flag name that sets the cfg field ``target`` of an sfx flag (looked up when used: the
    target may be an agent's flag, added after this one, and absent for another ``--algo``)."""

    def __init__(self, option_strings: Sequence[str], dest: str, target: str = "", **kwargs: Any) -> None:
        kwargs.setdefault("default", argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)
        self.target = target

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if not any(a.dest == self.target and a is not self for a in parser._actions):
            raise argparse.ArgumentError(self, f"is Sample Factory 2's name of --{self.target} (APPO's flag); "
                                               f"this --algo has no such flag")
        setattr(namespace, self.target, values)


class Sf2Only(AcceptOnly):
    """An SF2 flag accepted at the values that describe what sfx always does (stored nowhere: cfg.json
    carries sfx's flags only); another value is an error that says what to use in sfx."""

    accepted = "Sample Factory 2's flag, accepted here only as"
    store = False

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("default", argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)


def add_sf2_compat_args(parser: argparse.ArgumentParser) -> None:
    """Add the Sample Factory 2.x flags sfx accepts (see the module docstring) to ``parser``."""
    g = parser.add_argument_group(
        SF2_GROUP,
        "Sample Factory 2.x spellings: an alias sets the sfx flag it names; a flag of SF2 whose value sfx always "
        "has is accepted at that value, and another value is an error naming sfx's way")
    g.add_argument("--num_epochs", type=int, metavar="N", action=Sf2Alias, target="ppo_epochs",
                   help="SF2's name of APPO's ppo_epochs flag (passes over each iteration's data) "
                        "(default: not given, APPO's flag decides)")
    g.add_argument("--restart_behavior", choices=RESTART_BEHAVIORS, default="resume",
                   help="when the experiment folder exists (SF2's meanings): resume = continue it; restart = keep "
                        "it as <experiment>_old_<time> and start afresh; overwrite = delete it and start afresh")
    g.add_argument("--async_rl", type=str2bool, nargs="?", const=True, metavar="BOOL", action=Sf2Only,
                   allowed=(True,),
                   why="sfx always samples while the learner trains; for (nearly) on-policy batches use "
                       "--batches_ahead=1 (the collection gate: one batch ahead of the learner) and a small --max_policy_lag, or --serial_mode=True (one process)",
                   help="SF2: sample while training; sfx always does (True is the only value) (default: not given)")
    g.add_argument("--batched_sampling", type=str2bool, nargs="?", const=True, metavar="BOOL", action=Sf2Only,
                   allowed=(False,),
                   why="sfx's rollout workers step their envs one by one (SF2's non-batched sampling); for more "
                       "throughput raise --num_envs_per_worker with --worker_num_splits=2, or --num_workers",
                   help="SF2: vectorised envs stepped as one batch; sfx steps envs one by one (False is the only "
                        "value) (default: not given)")
    g.add_argument("--value_bootstrap", type=str2bool, nargs="?", const=True, metavar="BOOL", action=Sf2Only,
                   allowed=(True,),
                   why="sfx always bootstraps the value of a truncated episode (gymnasium's truncated flag) and "
                       "never of a terminated one; to end episodes without a bootstrap, make the env report "
                       "terminated instead of truncated",
                   help="SF2: bootstrap the value at time-outs; sfx always does on truncation (True is the only "
                        "value) (default: not given)")
