"""Result tables: one row per group, the final value of each metric as mean +- std over seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sfx_tb.curves import RUN_KEYS, expand_metrics
from sfx_tb.errors import TbError

if TYPE_CHECKING:
    import pandas as pd

FPS_TAG = "fps"


def check_last_frac(last_frac: float) -> float:
    """``last_frac`` if it is in (0, 1], else a :class:`TbError`."""
    if not (isinstance(last_frac, (int, float)) and 0 < last_frac <= 1):
        raise TbError(f"--last_frac {last_frac!r} is not allowed: use a fraction in (0, 1], "
                      f"e.g. 0.1 for the last 10% of each run's points")
    return float(last_frac)


def final_values(df: pd.DataFrame, tag: str, last_frac: float = 0.1, positive_only: bool = False) -> pd.Series:
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


def summary_table(df: pd.DataFrame, metrics: str | Sequence[str] = "reward", last_frac: float = 0.1) -> pd.DataFrame:
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
