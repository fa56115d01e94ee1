"""Learning curves over seeds: runs interpolated to a common x grid, averaged per group, drawn with
matplotlib (Agg canvas, no window, no global pyplot state)."""

from __future__ import annotations

import fnmatch
import math
import os
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sfx_tb.errors import TbError, unknown_metric

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

X_AXES = ("env_steps", "time")
SPREADS = ("std", "minmax", "none")
FORMATS = ("png", "svg", "pdf")
RUN_KEYS = ["experiment", "policy"]  # one curve of one run: a policy of one experiment (seed)


def check_choice(flag: str, value: str, allowed: Sequence[str]) -> str:
    """``value`` if it is one of ``allowed``, else a :class:`TbError` naming both."""
    if value not in allowed:
        raise TbError(f"{flag} {value!r} is not allowed: use one of {', '.join(allowed)}")
    return value


def run_xy(df: pd.DataFrame, metric: str, x: str = "env_steps", smooth: int = 1) -> dict[tuple, tuple]:
    """``{(experiment, policy): (xs, ys)}`` of one metric, xs increasing and unique.

    ``x="time"`` measures seconds since the run's first point of any tag in ``df``. Repeated xs (a
    training resumed from a checkpoint logs some steps again) keep the newest value. ``smooth > 1``
    averages each point with the ``smooth - 1`` points before it.
    """
    check_choice("--x", x, X_AXES)
    if smooth < 1:
        raise TbError(f"--smooth {smooth} is not allowed: use a window of 1 point (off) or more")
    starts = df.groupby(RUN_KEYS)["wall_time"].min()
    rows = df[df["tag"] == metric]
    out: dict[tuple, tuple] = {}
    for key, run in rows.groupby(RUN_KEYS, sort=True):
        run = run.sort_values("wall_time", kind="stable")
        xs = run["step"].to_numpy(dtype=float) if x == "env_steps" else \
            run["wall_time"].to_numpy(dtype=float) - starts[key]
        ys = run["value"].to_numpy(dtype=float)
        order = np.argsort(xs, kind="stable")
        xs, ys = xs[order], ys[order]
        # keep the last of equal xs: the stable sort left the newest one last
        last = np.append(xs[1:] != xs[:-1], True)
        xs, ys = xs[last], ys[last]
        if smooth > 1:
            csum = np.cumsum(np.insert(ys, 0, 0.0))
            lo = np.maximum(np.arange(1, len(ys) + 1) - smooth, 0)
            ys = (csum[1:] - csum[lo]) / (np.arange(1, len(ys) + 1) - lo)
        out[key] = (xs, ys)
    return out


def aggregate_curves(df: pd.DataFrame, metric: str, x: str = "env_steps", smooth: int = 1,
                     points: int = 200) -> pd.DataFrame:
    """Mean and spread of one metric over the runs of each group, on a common x grid.

    Each run is linearly interpolated onto ``points`` evenly spaced xs spanning the range that all
    runs of the group cover (from the latest first point to the earliest last point), so that the
    mean never mixes seeds that stopped early with ones that went on. Where the runs share no range
    (one has a single point), the grid spans all of them and each x averages the runs covering it.

    Returns:
        A DataFrame with columns group, x, mean, std (over runs, ddof=0), min, max, n (runs
        averaged at that x), sorted by group and x.
    """
    import pandas as pd

    if points < 2:
        raise TbError(f"--points {points} is not allowed: use 2 or more grid points")
    curves = run_xy(df, metric, x, smooth)
    group_of = df.drop_duplicates(RUN_KEYS).set_index(RUN_KEYS)["group"]
    by_group: dict[str, list[tuple]] = {}
    for key, xy in curves.items():
        by_group.setdefault(group_of[key], []).append(xy)
    frames = []
    for group, runs in by_group.items():
        lo = max(xs[0] for xs, _ in runs)
        hi = min(xs[-1] for xs, _ in runs)
        if not lo < hi:
            lo = min(xs[0] for xs, _ in runs)
            hi = max(xs[-1] for xs, _ in runs)
        grid = np.linspace(lo, hi, points) if lo < hi else np.array([lo])
        values = np.full((len(runs), len(grid)), np.nan)
        for i, (xs, ys) in enumerate(runs):
            inside = (grid >= xs[0]) & (grid <= xs[-1])
            values[i, inside] = np.interp(grid[inside], xs, ys)
        n = np.sum(~np.isnan(values), axis=0)
        keep = n > 0
        v = values[:, keep]
        frames.append(pd.DataFrame({
            "group": group, "x": grid[keep], "mean": np.nanmean(v, axis=0), "std": np.nanstd(v, axis=0),
            "min": np.nanmin(v, axis=0), "max": np.nanmax(v, axis=0), "n": n[keep],
        }))
    if not frames:
        return pd.DataFrame(columns=["group", "x", "mean", "std", "min", "max", "n"])
    return pd.concat(frames, ignore_index=True)


def expand_metrics(metrics: Sequence[str], tags: Sequence[str]) -> list[str]:
    """``metrics`` with patterns (``loss/*``) replaced by the matching ``tags``, in order, without repeats;
    a metric that matches no tag raises :class:`TbError` listing the tags."""
    tags = sorted(set(tags))
    out: list[str] = []
    for m in metrics:
        hits = [t for t in tags if fnmatch.fnmatchcase(t, m)]
        if not hits:
            raise unknown_metric(m, tags)
        out += [t for t in hits if t not in out]
    return out


# why a run drew a single dot: the trainer writes its scalars every --experiment_summaries_interval seconds
ONE_POINT_WHY = ("one point per run: each run was shorter than its summary interval (--experiment_summaries_interval, "
                 "seconds; default 20), so it wrote its scalars once; train longer or with a smaller interval for a curve")


def one_point_metrics(df: pd.DataFrame, metrics: Sequence[str]) -> list[str]:
    """The ``metrics`` (tags, no patterns) of which every run in ``df`` has at most one point: their panels
    show a dot per group instead of a curve."""
    counts = df.groupby(["tag", *RUN_KEYS]).size()
    return [m for m in metrics if m in counts.index.get_level_values(0) and counts.loc[m].max() <= 1]


def _fit_title(fig: Figure, title: str, height_in: float) -> None:
    """``title`` as the figure's title, wrapped to the figure's width (a line per fitting stretch of words;
    a word wider than the figure is cut) instead of clipped at its edges; the figure grows by the extra lines."""
    text = fig.suptitle(title)
    width = text.get_window_extent(fig.canvas.get_renderer()).width
    room = 0.94 * fig.bbox.width  # constrained layout keeps a small margin at each side
    if width <= room:
        return
    chars = max(8, int(len(title) * room / width))
    lines = textwrap.wrap(title, width=chars) or [title]
    text.set_text("\n".join(lines))
    line_in = text.get_fontsize() * 1.3 / 72
    fig.set_size_inches(fig.get_size_inches()[0], height_in + line_in * (len(lines) - 1))


def _time_unit(max_seconds: float) -> tuple[str, float]:
    if max_seconds >= 3 * 3600:
        return "h", 3600.0
    if max_seconds >= 3 * 60:
        return "min", 60.0
    return "s", 1.0


def output_path(out: str | os.PathLike, fmt: str | None) -> tuple[Path, str]:
    """The file to write and its format: ``fmt`` wins (the suffix is set to it), else the suffix of
    ``out``, which must then be one of :data:`FORMATS`."""
    out = Path(out)
    if fmt is not None:
        check_choice("--format", fmt, FORMATS)
        return (out if out.suffix.lower() == f".{fmt}" else out.with_suffix(f".{fmt}")), fmt
    suffix = out.suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise TbError(f"--out {str(out)!r}: cannot tell the image format from its suffix; end it with "
                      f"{', '.join('.' + f for f in FORMATS)} or pass --format")
    return out, suffix


def plot_curves(df: pd.DataFrame, metrics: str | Sequence[str] = "reward", x: str = "env_steps",
                spread: str = "std", smooth: int = 1, points: int = 200, title: str | None = None,
                out: str | os.PathLike | None = None, fmt: str | None = None) -> Figure:
    """Draw one panel per metric, one line per group (mean over its runs) with a shaded spread.

    Args:
        df: a table from :func:`sfx_tb.load_scalars`.
        metrics: tag(s) to draw, one panel each.
        x: ``"env_steps"`` (the event step) or ``"time"`` (wall time since each run's first point).
        spread: ``"std"`` (mean +- one std over runs), ``"minmax"`` (the range of runs) or ``"none"``.
        smooth: moving-average window in points, applied to each run before averaging (1 = off).
        points: size of the common x grid runs are interpolated onto.
        title: figure title, wrapped to the figure's width; None for none.
        out: where to save the figure (format from ``fmt`` or the suffix, see :func:`output_path`);
            None to only return it.
        fmt: ``"png"``, ``"svg"`` or ``"pdf"``.

    Returns:
        The matplotlib Figure (drawn on an Agg canvas: no window, works without a display).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    if not metrics:
        raise TbError("no --metric given: name at least one scalar, e.g. --metric reward")
    check_choice("--x", x, X_AXES)
    check_choice("--spread", spread, SPREADS)
    if df.empty:
        raise TbError("nothing to plot: the selected experiments have no scalars yet (no event files "
                      "under their .summary/ folders)")
    target = output_path(out, fmt) if out is not None else None
    metrics = expand_metrics(metrics, df["tag"].unique())

    aggregated = {m: aggregate_curves(df, m, x, smooth, points) for m in metrics}
    groups = list(dict.fromkeys(df["group"]))
    seeds = df.groupby("group")["experiment"].nunique()
    unit, scale = "", 1.0
    if x == "time":
        unit, scale = _time_unit(max((a["x"].max() for a in aggregated.values() if not a.empty), default=0.0))

    ncols = min(len(metrics), 3)
    nrows = math.ceil(len(metrics) / ncols)
    height_in = 3.8 * nrows + (0.4 if title else 0.0)
    fig = Figure(figsize=(5.2 * ncols, height_in), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    colors = [f"C{i % 10}" for i in range(len(groups))]
    lonely = set(one_point_metrics(df, metrics))
    for ax, metric in zip(axes, metrics):
        agg = aggregated[metric]
        if metric in lonely:  # the panel says why it holds a dot, not a curve
            why = "\n".join(textwrap.wrap(ONE_POINT_WHY, 60, break_on_hyphens=False))
            ax.text(0.5, 0.04, why, transform=ax.transAxes, ha="center", va="bottom", fontsize="x-small", color="0.35")
        for group, color in zip(groups, colors):
            g = agg[agg["group"] == group]
            if g.empty:
                continue
            xs = g["x"].to_numpy() / scale
            n = int(seeds.get(group, 0))
            label = f"{group} ({n} seed{'s' if n != 1 else ''})"
            marker = "o" if len(xs) == 1 else None
            ax.plot(xs, g["mean"], color=color, label=label, linewidth=1.6, marker=marker)
            if spread == "std":
                ax.fill_between(xs, g["mean"] - g["std"], g["mean"] + g["std"], color=color, alpha=0.2, linewidth=0)
            elif spread == "minmax":
                ax.fill_between(xs, g["min"], g["max"], color=color, alpha=0.2, linewidth=0)
        ax.set_title(metric)
        ax.set_ylabel(metric)
        if x == "env_steps":
            ax.set_xlabel("env steps")
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        else:
            ax.set_xlabel(f"wall time ({unit})")
        ax.grid(True, alpha=0.3)
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    spread_note = {"std": "mean ± std over seeds", "minmax": "mean, min-max over seeds", "none": "mean over seeds"}
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        axes[0].legend(handles, labels, fontsize="small", title=spread_note[spread], title_fontsize="small")
    if title:
        _fit_title(fig, title, height_in)
    if target is not None:
        path, fmt_ = target
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format=fmt_, dpi=150)
    return fig
