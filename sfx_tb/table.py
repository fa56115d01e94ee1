"""Result tables: one row per group, the final value of each metric as mean +- std over seeds; and for
multi-task trainings, one row per task of each run (``task/<name>/*`` scalars) with the suite scores
(``suite/*`` scalars)."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sfx_tb.curves import RUN_KEYS, expand_metrics
from sfx_tb.errors import TbError

if TYPE_CHECKING:
    import pandas as pd

FPS_TAG = "fps"
DEFAULT_LAST_FRAC = 0.1  # the table command's --last_frac


def check_last_frac(last_frac: float) -> float:
    """``last_frac`` if it is in (0, 1], else a :class:`TbError`."""
    if not (isinstance(last_frac, (int, float)) and 0 < last_frac <= 1):
        raise TbError(f"--last_frac {last_frac!r} is not allowed: use a fraction in (0, 1], "
                      f"e.g. 0.1 for the last 10% of each run's points")
    return float(last_frac)


def final_values(df: pd.DataFrame, tag: str, last_frac: float = DEFAULT_LAST_FRAC,
                 positive_only: bool = False) -> pd.Series:
    """Per run (experiment, policy): the mean of the last ``ceil(last_frac * n)`` of its ``n`` points
    of ``tag`` in step order (at least one point). ``positive_only`` first drops values <= 0."""
    check_last_frac(last_frac)
    rows = df[df["tag"] == tag]
    if positive_only:
        rows = rows[rows["value"] > 0]
    rows = rows.sort_values(RUN_KEYS + ["step", "wall_time"], kind="stable")

    def tail_mean(values: pd.Series) -> float:
        k = max(1, math.ceil(last_frac * len(values)))
        return float(values.iloc[-k:].mean())

    return rows.groupby(RUN_KEYS)["value"].apply(tail_mean)


def summary_table(df: pd.DataFrame, metrics: str | Sequence[str] = "reward",
                  last_frac: float = DEFAULT_LAST_FRAC) -> pd.DataFrame:
    """One row per group of seeds with the final value of each metric.

    A run is one policy of one experiment. Its final value is the mean of the last ``last_frac`` of
    its points (see :func:`final_values`); the group's ``<metric>_mean`` and ``<metric>_std`` are the
    mean and the standard deviation (ddof=0: 0 for a single seed) of its runs' final values.

    Returns:
        A DataFrame with columns ``group``, ``seeds`` (experiments of the group with scalars),
        ``<metric>_mean``, ``<metric>_std`` per metric, ``env_steps`` (the smallest last step among
        the group's runs: what every seed reached) and ``fps`` (mean over runs of the final ``fps``
        scalar, zeros logged before the first measurement skipped; NaN without ``fps``), in the
        order the groups first appear in ``df``.
    """
    import pandas as pd

    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    check_last_frac(last_frac)
    if df.empty:
        raise TbError("nothing to tabulate: the selected experiments have no scalars yet (no event "
                      "files under their .summary/ folders)")
    metrics = expand_metrics(metrics, df["tag"].unique())
    group_of = df.drop_duplicates(RUN_KEYS).set_index(RUN_KEYS)["group"]
    groups = list(dict.fromkeys(df["group"]))
    table = pd.DataFrame({"group": groups})
    table["seeds"] = [df.loc[df["group"] == g, "experiment"].nunique() for g in groups]
    for metric in metrics:
        finals = final_values(df, metric, last_frac)
        by_group = finals.groupby(group_of.reindex(finals.index).to_numpy())
        table[f"{metric}_mean"] = table["group"].map(by_group.mean())
        table[f"{metric}_std"] = table["group"].map(by_group.std(ddof=0))
    last_step = df.groupby(RUN_KEYS)["step"].max()
    table["env_steps"] = table["group"].map(
        last_step.groupby(group_of.reindex(last_step.index).to_numpy()).min()).astype("Int64")
    fps = final_values(df, FPS_TAG, last_frac, positive_only=True)
    fps_by_group = fps.groupby(group_of.reindex(fps.index).to_numpy()).mean() if len(fps) else pd.Series(dtype=float)
    table["fps"] = table["group"].map(fps_by_group).astype(float)
    table.attrs["metrics"] = metrics  # tells to_markdown which columns are metrics
    return table


def _num(value: float, fmt: str) -> str:
    return "-" if _isna(value) else format(value, fmt)


def to_markdown(table: pd.DataFrame) -> str:
    """A :func:`summary_table` as a Markdown table: ``mean ± std`` per metric, steps and FPS rounded.

    Written here rather than with ``DataFrame.to_markdown`` so that no ``tabulate`` package is needed.
    """
    metrics = table.attrs.get("metrics") or [c[: -len("_mean")] for c in table.columns if c.endswith("_mean")]
    header = ["group", "seeds"] + [f"{m} (mean ± std)" for m in metrics] + ["env steps", "FPS"]
    rows = []
    for _, r in table.iterrows():
        cells = [str(r["group"]).replace("|", "\\|"), str(int(r["seeds"]))]
        for m in metrics:
            mean, std = r[f"{m}_mean"], r[f"{m}_std"]
            cells.append("-" if _isna(mean) else f"{_num(mean, '.4g')} ± {_num(std, '.3g')}")
        cells.append(_num(r["env_steps"], ","))
        cells.append(_num(r["fps"], ",.0f"))
        rows.append(cells)
    right = [False, True] + [True] * len(metrics) + [True, True]
    lines = ["| " + " | ".join(header) + " |",
             "| " + " | ".join("---:" if r else "---" for r in right) + " |"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def _isna(value: object) -> bool:
    """True for None, NaN and pandas' NA."""
    import pandas as pd

    return bool(pd.isna(value))


# --- per-task view of multi-task trainings -------------------------------------------------------

TASK_PREFIX = "task/"    # task/<name>/<metric>: one task of a multi-task training
SUITE_PREFIX = "suite/"  # suite/<metric>: scores over all tasks of one training
TASK_METRICS_FIRST = ("reward", "hns", "len")
SUITE_METRICS_FIRST = ("hns_mean", "hns_median", "hns_mean_capped", "num_tasks")


def split_task_tag(tag: str) -> tuple[str, str] | None:
    """``task/atari_pong/reward`` -> ``("atari_pong", "reward")``; None for a tag of another form.

    The metric is the last ``/`` piece, so a task name may itself hold ``/``.
    """
    if not tag.startswith(TASK_PREFIX):
        return None
    task, sep, metric = tag[len(TASK_PREFIX):].rpartition("/")
    if not sep or not task or not metric:
        return None
    return task, metric


def _ordered(names: set[str], first: Sequence[str]) -> list[str]:
    return [n for n in first if n in names] + sorted(names - set(first))


def _finals_by_tag(rows: pd.DataFrame, last_frac: float | None) -> tuple[pd.Series, pd.Series]:
    """Per (experiment, policy, tag): the final value (the last point in step order, or with
    ``last_frac`` the mean of that last fraction of the points) and the last step."""
    keys = RUN_KEYS + ["tag"]
    rows = rows.sort_values(keys + ["step", "wall_time"], kind="stable")
    by = rows.groupby(keys, sort=False)

    def tail_mean(values: pd.Series) -> float:
        k = 1 if last_frac is None else max(1, math.ceil(last_frac * len(values)))
        return float(values.iloc[-k:].mean())

    return by["value"].apply(tail_mean), by["step"].max()


def _no_task_scalars(df: pd.DataFrame) -> TbError:
    n = df["experiment"].nunique()
    return TbError(f"the {n} selected experiment(s) have no per-task scalars ({TASK_PREFIX}<name>/reward): "
                   f"trained with one task? --per_task needs a multi-task training "
                   f"(--env=multitask --multitask_envs=..., or --env=dmlab_30)")


def _run_info(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop_duplicates(RUN_KEYS).set_index(RUN_KEYS)[["group", "seed"]]


def per_task_table(df: pd.DataFrame, metrics: str | Sequence[str] | None = None,
                   last_frac: float | None = None) -> pd.DataFrame:
    """One row per task of each run (experiment, policy) of a multi-task training.

    Tasks are found from the tags ``task/<name>/<metric>``. A run's value of a metric for a task is
    the last point of ``task/<name>/<metric>`` (in step order), or with ``last_frac`` the mean of
    that last fraction of its points, as :func:`summary_table` takes them.

    Args:
        df: scalars as :func:`sfx_tb.scalars.load_scalars` returns them.
        metrics: per-task metrics to show (``reward``, ``hns``, ``len``; patterns allowed); None:
            every one found, ``reward``, ``hns``, ``len`` first.
        last_frac: None for the last point, else a fraction in (0, 1].

    Returns:
        A DataFrame with columns ``experiment``, ``group``, ``seed``, ``policy``, ``task``, one column
        per metric (NaN where a task does not log it, e.g. ``hns`` of a task without human baselines)
        and ``env_steps`` (the step of the task's last point), sorted by experiment, policy, task.

    Raises:
        TbError: ``df`` is empty, has no per-task scalars, or a metric is not a per-task scalar.
    """
    import pandas as pd

    if last_frac is not None:
        check_last_frac(last_frac)
    if df.empty:
        raise TbError("nothing to tabulate: the selected experiments have no scalars yet (no event "
                      "files under their .summary/ folders)")
    task_tags = {tag: parts for tag in df["tag"].unique() if (parts := split_task_tag(tag))}
    if not task_tags:
        raise _no_task_scalars(df)
    found = {metric for _, metric in task_tags.values()}
    if metrics is None:
        chosen = _ordered(found, TASK_METRICS_FIRST)
    else:
        chosen = []
        for pattern in [metrics] if isinstance(metrics, str) else metrics:
            hits = _ordered({m for m in found if fnmatch.fnmatchcase(m, pattern)}, TASK_METRICS_FIRST)
            if not hits:
                raise TbError(f"metric {pattern!r} is not a per-task scalar ({TASK_PREFIX}<name>/{pattern}) of "
                              f"the selected experiments; their per-task scalars: "
                              f"{', '.join(_ordered(found, TASK_METRICS_FIRST))}")
            chosen += [m for m in hits if m not in chosen]
    finals, last_steps = _finals_by_tag(df[df["tag"].isin(list(task_tags))], last_frac)
    records: dict[tuple, dict[str, float]] = {}
    for (experiment, policy, tag), value in finals.items():
        task, metric = task_tags[tag]
        record = records.setdefault((experiment, policy, task), {"env_steps": -1})
        record["env_steps"] = max(record["env_steps"], int(last_steps[(experiment, policy, tag)]))
        if metric in chosen:
            record[metric] = value
    info = _run_info(df)
    keys = sorted(records)
    table = pd.DataFrame({
        "experiment": pd.Series([k[0] for k in keys], dtype=object),
        "group": pd.Series([info.loc[(k[0], k[1]), "group"] for k in keys], dtype=object),
        "seed": pd.array([info.loc[(k[0], k[1]), "seed"] for k in keys], dtype="Int64"),
        "policy": pd.Series([k[1] for k in keys], dtype="int64"),
        "task": pd.Series([k[2] for k in keys], dtype=object),
    })
    for metric in chosen:
        table[metric] = pd.Series([records[k].get(metric, math.nan) for k in keys], dtype="float64")
    table["env_steps"] = pd.array([records[k]["env_steps"] for k in keys], dtype="Int64")
    table.attrs["metrics"] = chosen
    return table


def suite_table(df: pd.DataFrame, last_frac: float | None = None) -> pd.DataFrame:
    """One row per run (experiment, policy) that logs suite scalars (``suite/hns_mean``, ...).

    Returns:
        A DataFrame with columns ``experiment``, ``group``, ``seed``, ``policy``, ``tasks`` (how many
        tasks the run logs ``task/<name>/...`` scalars for), one column per suite metric (``hns_mean``,
        ``hns_median``, ``hns_mean_capped`` first) and ``env_steps`` (the step of the last suite point);
        no rows when no run logs suite scalars. Values are taken as in :func:`per_task_table`.
    """
    import pandas as pd

    if last_frac is not None:
        check_last_frac(last_frac)
    suite_tags = [t for t in df["tag"].unique() if t.startswith(SUITE_PREFIX) and len(t) > len(SUITE_PREFIX)]
    metrics = _ordered({t[len(SUITE_PREFIX):] for t in suite_tags}, SUITE_METRICS_FIRST)
    columns = ["experiment", "group", "seed", "policy", "tasks"] + metrics + ["env_steps"]
    if not suite_tags:
        return pd.DataFrame({c: [] for c in columns})
    finals, last_steps = _finals_by_tag(df[df["tag"].isin(suite_tags)], last_frac)
    task_rows = df[df["tag"].map(lambda t: split_task_tag(t) is not None)]
    tasks_per_run = task_rows.assign(task=task_rows["tag"].map(lambda t: split_task_tag(t)[0])) \
        .groupby(RUN_KEYS)["task"].nunique()
    runs = sorted({k[:2] for k in finals.index})
    info = _run_info(df)
    table = pd.DataFrame({
        "experiment": pd.Series([r[0] for r in runs], dtype=object),
        "group": pd.Series([info.loc[r, "group"] for r in runs], dtype=object),
        "seed": pd.array([info.loc[r, "seed"] for r in runs], dtype="Int64"),
        "policy": pd.Series([r[1] for r in runs], dtype="int64"),
        "tasks": pd.Series([int(tasks_per_run.get(r, 0)) for r in runs], dtype="int64"),
    })
    for metric in metrics:
        tag = SUITE_PREFIX + metric
        table[metric] = pd.Series([finals.get((*r, tag), math.nan) for r in runs], dtype="float64")
    table["env_steps"] = pd.array([max(int(last_steps[k]) for k in last_steps.index if k[:2] == r) for r in runs],
                                  dtype="Int64")
    table.attrs["metrics"] = metrics
    return table


def _score(value: float) -> str:
    """Scores as people read them: 4 significant digits, big game scores in full with separators."""
    if _isna(value):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 10_000 else format(value, ".4g")


def _markdown(header: list[str], right: list[bool], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "| " + " | ".join("---:" if r else "---" for r in right) + " |"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def _run_cells(r: pd.Series, with_policy: bool) -> list[str]:
    cells = [str(r["experiment"]).replace("|", "\\|")]
    return cells + [str(int(r["policy"]))] if with_policy else cells


def per_task_markdown(table: pd.DataFrame) -> str:
    """A :func:`per_task_table` as Markdown: one row per (run, task); a policy column only when some
    experiment trains a policy other than 0."""
    metrics = table.attrs.get("metrics") or [c for c in table.columns if c not in
                                             ("experiment", "group", "seed", "policy", "task", "env_steps")]
    with_policy = bool((table["policy"] != 0).any())
    header = ["experiment"] + (["policy"] if with_policy else []) + ["task"] + metrics + ["env steps"]
    right = [False] + ([True] if with_policy else []) + [False] + [True] * len(metrics) + [True]
    rows = [_run_cells(r, with_policy) + [str(r["task"]).replace("|", "\\|")]
            + [_score(r[m]) for m in metrics] + [_num(r["env_steps"], ",")]
            for _, r in table.iterrows()]
    return _markdown(header, right, rows)


def suite_markdown(table: pd.DataFrame) -> str:
    """A :func:`suite_table` as Markdown: one row per run, the suite scores rounded."""
    metrics = table.attrs.get("metrics") or [c for c in table.columns if c not in
                                             ("experiment", "group", "seed", "policy", "tasks", "env_steps")]
    with_policy = bool((table["policy"] != 0).any())
    header = ["experiment"] + (["policy"] if with_policy else []) + ["tasks"] \
        + [m.replace("_", " ") for m in metrics] + ["env steps"]
    right = [False] + ([True] if with_policy else []) + [True] * (len(metrics) + 2)
    rows = [_run_cells(r, with_policy) + [str(int(r["tasks"]))] + [_score(r[m]) for m in metrics]
            + [_num(r["env_steps"], ",")] for _, r in table.iterrows()]
    return _markdown(header, right, rows)
