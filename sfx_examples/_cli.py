"""What the examples share: their default flags, with whatever the user typed taking precedence."""

from __future__ import annotations

import sys
from typing import Sequence


def with_defaults(defaults: Sequence[str], argv: Sequence[str] | None = None) -> list[str]:
    """``defaults`` followed by ``argv`` (``sys.argv[1:]`` when None): argparse keeps the last value
    of a repeated flag, so every flag the user gives replaces the example's default."""
    return [*defaults, *(sys.argv[1:] if argv is None else argv)]
