"""The interface every backend implements (processes, slurm, ngc)."""

from __future__ import annotations

import abc
import argparse
import shlex
import signal
from typing import ClassVar

from sfx_runner.run_description import ExperimentSpec, RunDescription


class Backend(abc.ABC):
    """Launches the experiments of a run somewhere.

    The CLI builds a backend from the parsed command line, drops the experiments that already
    finished (their ``done`` file), then calls :meth:`launch` or :meth:`dry_run` with the rest.
    Backends record what they do in the run's state files (:mod:`sfx_runner.state`).
    """

    name: ClassVar[str]

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser) -> None:
        """Add this backend's flags (prefixed with the backend's name, except the processes backend's)."""

    @abc.abstractmethod
    def launch(self, specs: list[ExperimentSpec], run: RunDescription) -> int:
        """Run or submit ``specs``. Returns the CLI's exit status: 0 when every experiment finished (or
        was submitted), 1 when any failed, 130 when the launch was interrupted (Ctrl+C)."""

    @abc.abstractmethod
    def dry_run(self, specs: list[ExperimentSpec], run: RunDescription) -> None:
        """Print what :meth:`launch` would run, one experiment per line or block; start nothing."""


def format_command(spec: ExperimentSpec, argv: list[str] | None = None, env: dict[str, str] | None = None) -> str:
    """A shell line that runs the experiment: ``KEY=value ... <argv quoted>``, ready to paste into a shell."""
    env = dict(spec.env_vars if env is None else env)
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    line = shlex.join(spec.argv if argv is None else argv)
    return f"{prefix} {line}" if prefix else line


def parse_bool(text: str) -> bool:
    """A flag value: ``True/False``, ``1/0``, ``yes/no``, ``on/off`` (so ``--flag`` and sfx.train's
    ``--flag=True`` style both work); argparse reports anything else with the allowed values."""
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (True or False)")


# sfx.train's exit code for "another rank of this training died or hung: start me again, I resume from
# rank 0's checkpoint" (EX_TEMPFAIL; mirrors sfx.train.EXIT_CODES["rank_lost"]: sfx_runner imports no sfx)
RESUME_EXIT_CODE = 75
# sfx.train's exit code after a stop it did not finish from (Ctrl+C, SIGTERM, or, with several ranks, another
# rank's stop): a final checkpoint was saved, the same command resumes (mirrors EXIT_CODES["interrupted"])
INTERRUPTED_EXIT_CODE = 130


def describe_returncode(returncode: int) -> str:
    """A child's return code in words: ``killed by SIGKILL``, ``exit code 75: another rank died or hung``,
    ``exit code 1``."""
    if returncode == RESUME_EXIT_CODE:
        return f"exit code {returncode}: another rank died or hung"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"
