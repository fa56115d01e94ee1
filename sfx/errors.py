"""The one exception type for bad user input: the ground floor every room may import (no sfx imports)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad command-line value, env name, experiment folder or saved file.

    The message is one line that names the bad value and says what is allowed, so entry points
    can print it as-is (``sfx: error: <message>``) instead of a stack trace.
    """
