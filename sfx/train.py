"""``python -m sfx.train --env=... --experiment=...``: train an agent (asynchronous APPO).

Run with ``--help`` for every flag and its default. An existing experiment folder is resumed.
"""

from __future__ import annotations

import sys

from sfx.cfg import ConfigError, parse_args
from sfx.engine import run_training

EXIT_CODES = {"done": 0, "failed": 1, "interrupted": 130}


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_args(argv)
        result = run_training(cfg)  # raises ConfigError before any worker starts, e.g. on bad checkpoints
    except ConfigError as e:
        print(f"sfx: error: {e}", file=sys.stderr)
        return 2
    return EXIT_CODES[result["status"]]


__all__ = ["main", "run_training"]

if __name__ == "__main__":
    sys.exit(main())
