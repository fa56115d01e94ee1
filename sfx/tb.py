"""``python -m sfx.tb [serve|plot|table|evaluate] PATTERN... [--dir train_dir] ...``: monitoring of experiments.

A thin entry point: everything is in :mod:`sfx_tb.cli`, which imports neither torch nor the trainer. This entry
point adds what sfx knows and sfx_tb does not: the human-normalised scores of the Atari-57 and DMLab-30 tasks
(:mod:`sfx.envs.task_scores`, torch-free), which the aggregates use with ``--normalize=auto``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from sfx_tb.cli import main as _cli_main

HUMAN_NORMALISED = "human-normalised (1 = human)"


def human_normalized(task: str, raw: float) -> float | None:
    """The task's human-normalised score as a fraction (0 = random, 1 = human), None outside Atari-57 / DMLab-30."""
    from sfx.envs.task_scores import human_normalized_score

    hns = human_normalized_score(task, raw)
    return None if hns is None else hns / 100.0


def main(argv: Sequence[str] | None = None) -> int:
    return _cli_main(argv, normalizer=human_normalized, normalizer_name=HUMAN_NORMALISED)


if __name__ == "__main__":
    sys.exit(main())
