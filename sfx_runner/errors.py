"""The one exception the runner raises for bad input."""

from __future__ import annotations


class RunnerError(Exception):
    """Bad input to the runner: a run description, a flag, a missing file or executable.

    The message names the bad value and what is allowed. ``python -m sfx.runner.run`` prints it as
    ``error: <message>`` and exits with status 2, without a traceback.
    """
