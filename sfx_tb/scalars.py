"""Event files -> one pandas table of scalars, read with TensorBoard's own reader (no TensorFlow)."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from sfx_tb.errors import unknown_metric
from sfx_tb.experiments import ExperimentDir, select_experiments, split_patterns

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ("experiment", "group", "seed", "policy", "tag", "step", "wall_time", "value")


def policy_dirs(exp: ExperimentDir) -> list[tuple[int, Path]]:
    """``(policy index, folder)`` for each ``.summary/<N>/`` of an experiment, by index."""
    if not exp.summary_dir.is_dir():
        return []
    out = []
    for entry in os.scandir(exp.summary_dir):
        if entry.is_dir() and entry.name.isdigit():
            out.append((int(entry.name), Path(entry.path)))
    return sorted(out)


def read_scalar_events(folder: str | os.PathLike) -> dict[str, list[tuple[int, float, float]]]:
    """Every scalar of the event files in ``folder``: ``{tag: [(step, wall_time, value), ...]}``.

    TensorBoard's ``EventAccumulator`` reads all event files of the folder in order (a resumed
    training adds a file) and keeps every point (no sampling).
    """
    # imported here: tensorboard's reader costs a second of start-up the server and --help do not need
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(folder), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(int(e.step), float(e.wall_time), float(e.value)) for e in acc.Scalars(tag)]
            for tag in acc.Tags()[event_accumulator.SCALARS]}


def load_scalars(patterns: str | Iterable[str], dir: str | os.PathLike = "train_dir",  # noqa: A002
                 metrics: str | Iterable[str] | None = None, policy: int | None = None) -> pd.DataFrame:
    """All scalars of the experiments matching ``patterns`` under ``dir``, one row per point.

    Args:
        patterns: shell-style patterns on experiment names (``'*cartpole*'``, ``'quickstart'``,
            ``['*lea=0.001*', '*lea=0.003*']``); a pattern that matches nothing raises
            :class:`~sfx_tb.errors.TbError` with near names.
        dir: the train dir (sfx.train's ``--train_dir``).
        metrics: tags to keep (``'reward'``, ``['reward', 'loss/*']``; patterns allowed); None keeps
            all. A metric that no selected experiment logs raises :class:`TbError` listing the tags.
        policy: keep only this policy index; None keeps all.

    Returns:
        A DataFrame sorted by experiment, policy, tag, step, with columns

        - ``experiment`` (str): experiment folder relative to ``dir`` (``quickstart/01_cartpole_see=1``)
        - ``group`` (str): label shared by the experiments that differ only by seed
        - ``seed`` (Int64, may be missing): the experiment's seed
        - ``policy`` (int): policy index (the ``.summary/<policy>/`` folder)
        - ``tag`` (str): scalar name (``reward``, ``fps``, ``loss/policy``, ...)
        - ``step`` (int): the event's step: env steps of that policy
        - ``wall_time`` (float): seconds since the epoch when the point was written
        - ``value`` (float): the scalar
    """
    import pandas as pd

    experiments, _ = select_experiments(patterns, dir, on_missing="error")
    wanted = None if metrics is None else split_patterns(metrics)
    columns: dict[str, list] = {c: [] for c in COLUMNS}
    all_tags: set[str] = set()
    for exp in experiments:
        for pol, folder in policy_dirs(exp):
            if policy is not None and pol != policy:
                continue
            for tag, points in read_scalar_events(folder).items():
                all_tags.add(tag)
                if wanted is not None and not any(fnmatch.fnmatchcase(tag, m) for m in wanted):
                    continue
                n = len(points)
                columns["experiment"] += [exp.name] * n
                columns["group"] += [exp.group] * n
                columns["seed"] += [exp.seed] * n
                columns["policy"] += [pol] * n
                columns["tag"] += [tag] * n
                for step, wall_time, value in points:
                    columns["step"].append(step)
                    columns["wall_time"].append(wall_time)
                    columns["value"].append(value)
    if wanted is not None and all_tags:
        for m in wanted:
            if not any(fnmatch.fnmatchcase(t, m) for t in all_tags):
                raise unknown_metric(m, all_tags)
    df = pd.DataFrame({
        "experiment": pd.Series(columns["experiment"], dtype=object),
        "group": pd.Series(columns["group"], dtype=object),
        "seed": pd.array(columns["seed"], dtype="Int64"),
        "policy": pd.Series(columns["policy"], dtype="int64"),
        "tag": pd.Series(columns["tag"], dtype=object),
        "step": pd.Series(columns["step"], dtype="int64"),
        "wall_time": pd.Series(columns["wall_time"], dtype="float64"),
        "value": pd.Series(columns["value"], dtype="float64"),
    })
    return df.sort_values(["experiment", "policy", "tag", "step"], kind="stable").reset_index(drop=True)
