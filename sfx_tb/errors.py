"""The one error type of sfx_tb: bad input (a pattern, a metric, a flag value) explained in one line."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class TbError(Exception):
    """Bad input to sfx_tb; the message names the bad value and what is allowed instead.

    The command line prints it as ``sfx.tb: error: <message>`` and exits with status 2.
    """


def unknown_metric(metric: str, tags: Iterable[str]) -> TbError:
    """The error for a ``--metric`` that no selected experiment logs: near tags first, then all of them."""
    tags = sorted(set(tags))
    near = difflib.get_close_matches(metric, tags, n=5, cutoff=0.4)
    near += [t for t in tags if metric.lower() in t.lower() and t not in near]
    hint = f"; near: {', '.join(near[:5])}" if near else ""
    return TbError(f"metric {metric!r} is not a scalar of the selected experiments{hint}; "
                   f"their scalars: {', '.join(tags) or 'none yet'}")
