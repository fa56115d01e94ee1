"""Aggregates over seeds and tasks, as the field reports them: per *method*, the interquartile mean, the mean, the
median of task means and the optimality gap of its runs' scores over all its tasks, each with a stratified
bootstrap confidence interval; the probability that one method beats another; performance profiles.
The statistics themselves are :mod:`sfx_tb.stats`.

- A *run* is one policy of one experiment (a seed); its *score* on its task is the final value of a scalar
  of its event files (as :func:`sfx_tb.table.final_values` takes it) or, with evaluation results files
  (``eval_results_p<policy>.json``, written by ``python -m sfx.enjoy``), the evaluation's mean return.
- A *task* is the experiment's ``--env`` (its cfg.json); a multi-task training's runs score each of their tasks
  (its ``task/<name>/<metric>`` scalars).
- A *method* is what the experiments set besides ``--env`` and ``--seed``: experiments of the same run folder
  with the same explicitly given flags (cfg.json's ``explicit_args``) but those two, or, with
  ``method_by``, the same values of the named cfg keys.

Scores are normalised per task where a suite defines scores: a ``normalizer(task, raw) -> float | None``
(``python -m sfx.tb`` passes the Atari-57 and DMLab-30 human-normalised scores of :mod:`sfx.envs.task_scores`
as a fraction: 0 = random, 1 = human), or per-task ``(low, high)`` pairs: ``(raw - low) / (high - low)``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sfx_tb import stats
from sfx_tb.errors import TbError
from sfx_tb.experiments import IGNORED_CFG_KEYS, ExperimentDir

if TYPE_CHECKING:
    import pandas as pd

RESULTS_GLOB = "eval_results_p*.json"
RESULTS_FORMAT = "sfx.eval_results/1"
# besides the seed and the bookkeeping keys, what never tells methods apart
NOT_METHOD_KEYS = IGNORED_CFG_KEYS | {"env"}
NORMALIZE_CHOICES = ("auto", "none")  # or the path of a JSON file {task: [low, high]}

Normalizer = Callable[[str, float], "float | None"]


# --- what each run is ------------------------------------------------------------------------------

def task_of(exp: ExperimentDir) -> str:
    """The experiment's task: its cfg's ``env``, else its group's name (no cfg.json to tell)."""
    if exp.cfg is not None and exp.cfg.get("env"):
        return str(exp.cfg["env"])
    return exp.group or exp.name


def _method_keys(exp: ExperimentDir, method_by: Sequence[str] | None) -> dict[str, Any]:
    cfg = exp.cfg or {}
    if method_by:
        missing = [k for k in method_by if k not in cfg]
        if exp.cfg is not None and missing:
            raise TbError(f"--method_by {','.join(missing)}: not a key of {exp.name}/cfg.json; allowed: its keys, "
                          f"e.g. learning_rate, algo, use_rnn")
        return {k: cfg.get(k) for k in method_by}
    explicit = cfg.get("explicit_args")
    keys = explicit if isinstance(explicit, list) else list(cfg)
    return {k: cfg.get(k) for k in sorted(keys) if k not in NOT_METHOD_KEYS}


def assign_methods(experiments: Sequence[ExperimentDir], method_by: Sequence[str] | None = None) -> dict[str, str]:
    """Experiment name -> method label (see the module docstring). A label is the run folder (``.`` for
    experiments right under the train dir), with ``[key=value, ...]`` where methods of one folder differ
    (with ``method_by``: just the values of those keys)."""
    keyed: dict[str, tuple[str, str]] = {}
    values: dict[str, dict[str, Any]] = {}
    for exp in experiments:
        parent = "" if method_by else (exp.name.rpartition("/")[0] or ".")
        keys = _method_keys(exp, method_by)
        keyed[exp.name] = (parent, json.dumps(keys, sort_keys=True, default=str))
        values[exp.name] = keys
    labels: dict[tuple[str, str], str] = {}
    for parent in dict.fromkeys(p for p, _ in keyed.values()):
        members = [n for n, k in keyed.items() if k[0] == parent]
        signatures = list(dict.fromkeys(keyed[n][1] for n in members))
        differing = sorted({k for n in members for k in values[n]
                            if len({json.dumps(values[m].get(k), default=str) for m in members}) > 1})
        for sig in signatures:
            first = next(n for n in members if keyed[n][1] == sig)
            shown = ", ".join(f"{k}={values[first].get(k)}" for k in (method_by or differing))
            if method_by:
                labels[(parent, sig)] = shown
            else:
                labels[(parent, sig)] = f"{parent} [{shown}]" if shown else parent
    return {name: labels[key] for name, key in keyed.items()}


# --- scores per run ---------------------------------------------------------------------------------

SCORE_COLUMNS = ["method", "task", "experiment", "policy", "seed", "score"]


def _frame(rows: list[dict]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(rows, columns=SCORE_COLUMNS)


def scores_from_scalars(df: pd.DataFrame, experiments: Sequence[ExperimentDir], metric: str = "reward",
                        last_frac: float = 0.1, method_by: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per run and task with the final value of the scalar ``metric`` (``df``:
    :func:`sfx_tb.scalars.load_scalars`). A run of a multi-task training (``--env=multitask``, ``dmlab_30``) that
    logs ``task/<name>/<metric>`` gives one row per task, the task being ``<name>``; any other run one row."""
    from sfx_tb.table import final_values, split_task_tag

    by_name = {e.name: e for e in experiments}
    methods = assign_methods(experiments, method_by)
    rows: list[dict] = []

    def add(name: str, policy: int, task: str, value: float) -> None:
        exp = by_name[name]
        rows.append({"method": methods[name], "task": task, "experiment": name, "policy": int(policy),
                     "seed": exp.seed, "score": float(value)})

    per_task_runs = set()
    for tag in sorted(df["tag"].unique()):
        parts = split_task_tag(tag)
        if parts is None or parts[1] != metric:
            continue
        for (name, policy), value in final_values(df, tag, last_frac).items():
            per_task_runs.add((name, policy))
            add(name, policy, parts[0], value)
    for (name, policy), value in final_values(df, metric, last_frac).items():
        if (name, policy) not in per_task_runs:
            add(name, policy, task_of(by_name[name]), value)
    if not rows:
        tags = sorted(df["tag"].unique())
        raise TbError(f"--metric {metric!r}: no such scalar in the selected experiments; their scalars include: "
                      f"{', '.join(tags[:12])}")
    return _frame(rows)


def read_results(path: str | Path) -> dict:
    """One evaluation results file (see sfx.experiment.results); TbError naming the file if it is not one."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TbError(f"{path}: not a readable evaluation results file ({e}); run python -m sfx.enjoy again") from None
    if not isinstance(doc, dict) or doc.get("format") != RESULTS_FORMAT:
        raise TbError(f"{path}: not an evaluation results file of format {RESULTS_FORMAT!r}")
    return doc


def scores_from_results(experiments: Sequence[ExperimentDir], method_by: Sequence[str] | None = None,
                        policy: int | None = None) -> pd.DataFrame:
    """One row per evaluated run: the mean return of its newest evaluation results file. Experiments without
    one are left out (:class:`TbError` if none has one)."""
    methods = assign_methods(experiments, method_by)
    rows = []
    for exp in experiments:
        for path in sorted(exp.path.glob(RESULTS_GLOB)):
            doc = read_results(path)
            p = int(doc.get("policy_index", 0))
            if (policy is not None and p != policy) or doc.get("mean_reward") is None:
                continue
            rows.append({"method": methods[exp.name], "task": str(doc.get("env") or task_of(exp)),
                         "experiment": exp.name, "policy": p, "seed": exp.seed, "score": float(doc["mean_reward"])})
    if not rows:
        raise TbError(f"none of the {len(experiments)} selected experiment(s) has an evaluation results file "
                      f"({RESULTS_GLOB}): evaluate them first, e.g. python -m sfx.tb evaluate PATTERN "
                      f"--max_num_episodes=10")
    return _frame(rows)


# --- normalisation ------------------------------------------------------------------------------------

def load_ranges(path: str | Path) -> dict[str, tuple[float, float]]:
    """A JSON file ``{task: [low, high]}`` (e.g. random and human scores): per-task normalisation ranges."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise TbError(f"--normalize {str(path)!r}: not a readable JSON file ({e}); allowed: auto, none, or a "
                      f"JSON file {{\"task\": [low, high]}}") from None
    ranges = {}
    for task, pair in (doc.items() if isinstance(doc, dict) else []):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(v, (int, float)) for v in pair)
                and pair[0] != pair[1]):
            raise TbError(f"--normalize {str(path)!r}: task {task!r} maps to {pair!r}; allowed: [low, high], "
                          f"two different numbers")
        ranges[str(task)] = (float(pair[0]), float(pair[1]))
    if not ranges:
        raise TbError(f"--normalize {str(path)!r}: holds no {{\"task\": [low, high]}} entries")
    return ranges


def normalize(scores: pd.DataFrame, normalizer: Normalizer | Mapping[str, tuple[float, float]] | None,
              required: bool = False) -> tuple[pd.DataFrame, bool, list[str]]:
    """``scores`` with ``score`` normalised per task: ``(table, normalised, tasks without a normalisation)``.

    All tasks or none: where some task has no normalisation the raw scores stay (``normalised`` False), unless
    ``required``, then :class:`TbError` names those tasks."""
    if normalizer is None:
        return scores, False, []
    if isinstance(normalizer, Mapping):
        ranges = normalizer

        def normalizer(task: str, raw: float) -> float | None:  # the mapping as a function
            if task not in ranges:
                return None
            low, high = ranges[task]
            return (raw - low) / (high - low)

    values = [normalizer(t, s) for t, s in zip(scores["task"], scores["score"])]
    missing = sorted({t for t, v in zip(scores["task"], values) if v is None})
    if missing:
        if required:
            raise TbError(f"no normalisation range for task(s) {', '.join(missing)}: add them to the --normalize "
                          f"file, or use --normalize=none")
        return scores, False, missing
    out = scores.copy()
    out["score"] = np.asarray(values, dtype=float)
    return out, True, []


# --- per-method matrices and their statistics ---------------------------------------------------------

def score_matrix(scores: pd.DataFrame, method: str, tasks: Sequence[str] | None = None
                 ) -> tuple[list[str], np.ndarray, list[str]]:
    """``(tasks, [num_runs, num_tasks] scores, notes)`` of one method. Tasks with fewer runs than others make
    every task keep that many (the runs of the lowest seeds, then experiment names): the stratified
    bootstrap needs as many runs per task; the notes say so."""
    rows = scores[scores["method"] == method]
    tasks = sorted(rows["task"].unique()) if tasks is None else list(tasks)
    columns, notes = [], []
    for task in tasks:
        r = rows[rows["task"] == task]
        r = r.assign(_seed=r["seed"].fillna(-1)).sort_values(["_seed", "experiment", "policy"], kind="stable")
        columns.append(r["score"].to_numpy(dtype=float))
    counts = [len(c) for c in columns]
    if not counts or min(counts) == 0:
        raise TbError(f"method {method!r} has no runs of task(s) "
                      f"{', '.join(t for t, c in zip(tasks, counts) if c == 0) or '-'}")
    n = min(counts)
    if max(counts) != n:
        notes.append(f"{method}: tasks have {min(counts)} to {max(counts)} runs; {n} per task are used "
                     f"(the lowest seeds)")
    return tasks, np.stack([c[:n] for c in columns], axis=1), notes


STATISTICS: dict[str, Callable[[np.ndarray], float]] = {
    "iqm": stats.interquartile_mean,
    "mean": lambda x: float(np.mean(x)),
    "median": stats.median_of_task_means,
}


def aggregate_table(scores: pd.DataFrame, gamma: float | None = None, reps: int = 2000, confidence: float = 0.95,
                    seed: int | None = 0) -> tuple[pd.DataFrame, list[str]]:
    """One row per method: ``method``, ``tasks``, ``runs`` (per task), and for each of ``iqm``, ``mean``,
    ``median`` (and ``optimality_gap`` when ``gamma`` is given) the value and its ``_low`` / ``_high``
    stratified bootstrap percentile interval. Also returns notes (runs dropped to even the tasks)."""
    import pandas as pd

    check_bootstrap(reps, confidence)
    if scores.empty:
        raise TbError("nothing to aggregate: no run has a score")
    statistics = dict(STATISTICS)
    if gamma is not None:
        statistics["optimality_gap"] = lambda x: stats.optimality_gap(x, gamma)
    rows, notes = [], []
    for method in dict.fromkeys(scores["method"]):
        tasks, x, more = score_matrix(scores, method)
        notes += more
        row: dict[str, Any] = {"method": method, "tasks": len(tasks), "runs": x.shape[0]}
        for name, fn in statistics.items():
            ci = stats.stratified_bootstrap(fn, x, reps=reps, confidence=confidence, seed=seed)
            row[name], row[f"{name}_low"], row[f"{name}_high"] = ci
        rows.append(row)
    table = pd.DataFrame(rows)
    table.attrs["statistics"] = list(statistics)
    table.attrs["confidence"] = confidence
    return table, notes


def improvement_table(scores: pd.DataFrame, reps: int = 2000, confidence: float = 0.95,
                      seed: int | None = 0) -> tuple[pd.DataFrame, list[str]]:
    """Per ordered pair of methods (X listed before Y): ``P(X > Y)`` over their common tasks with its stratified
    bootstrap interval (``x``, ``y``, ``tasks``, ``p``, ``p_low``, ``p_high``). No rows for one method."""
    import pandas as pd

    check_bootstrap(reps, confidence)
    methods = list(dict.fromkeys(scores["method"]))
    rows, notes = [], []
    for i, a in enumerate(methods):
        for b in methods[i + 1:]:
            common = sorted(set(scores.loc[scores["method"] == a, "task"]) & set(scores.loc[scores["method"] == b, "task"]))
            if not common:
                notes.append(f"{a} and {b} share no task: no probability of improvement")
                continue
            _, x, n1 = score_matrix(scores, a, common)
            _, y, n2 = score_matrix(scores, b, common)
            ci = stats.stratified_bootstrap(stats.probability_of_improvement, x, y, reps=reps, confidence=confidence,
                                            seed=seed)
            rows.append({"x": a, "y": b, "tasks": len(common), "p": ci.value, "p_low": ci.low, "p_high": ci.high})
    table = pd.DataFrame(rows, columns=["x", "y", "tasks", "p", "p_low", "p_high"])
    table.attrs["confidence"] = confidence
    return table, notes


def check_bootstrap(reps: int, confidence: float) -> None:
    if not (isinstance(reps, int) and reps >= 1):
        raise TbError(f"--reps {reps!r} is not allowed: use a positive number of bootstrap replicates, e.g. 2000")
    if not (isinstance(confidence, (int, float)) and 0 < confidence < 1):
        raise TbError(f"--confidence {confidence!r} is not allowed: use a level in (0, 1), e.g. 0.95")


def _interval(value: float, low: float, high: float) -> str:
    def f(v: float) -> str:
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, ".4g")
    return f"{f(value)} [{f(low)}, {f(high)}]"


def aggregate_markdown(table: pd.DataFrame) -> str:
    """An :func:`aggregate_table` as Markdown: ``value [low, high]`` per statistic."""
    names = table.attrs.get("statistics") or [s for s in ("iqm", "mean", "median", "optimality_gap") if s in table]
    level = f"{table.attrs.get('confidence', 0.95) * 100:g}% CI"
    titles = {"iqm": "IQM", "mean": "mean", "median": "median", "optimality_gap": "optimality gap"}
    header = ["method", "tasks", "runs"] + [f"{titles.get(n, n)} [{level}]" for n in names]
    lines = ["| " + " | ".join(header) + " |", "| --- | ---: | ---: |" + " ---: |" * len(names)]
    for _, r in table.iterrows():
        cells = [str(r["method"]).replace("|", "\\|"), str(int(r["tasks"])), str(int(r["runs"]))]
        cells += [_interval(r[n], r[f"{n}_low"], r[f"{n}_high"]) for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def improvement_markdown(table: pd.DataFrame) -> str:
    """An :func:`improvement_table` as Markdown."""
    level = f"{table.attrs.get('confidence', 0.95) * 100:g}% CI"
    lines = [f"| X | Y | tasks | P(X > Y) [{level}] |", "| --- | --- | ---: | ---: |"]
    for _, r in table.iterrows():
        lines.append(f"| {str(r['x']).replace('|', chr(92) + '|')} | {str(r['y']).replace('|', chr(92) + '|')} | "
                     f"{int(r['tasks'])} | {_interval(r['p'], r['p_low'], r['p_high'])} |")
    return "\n".join(lines)


def plot_profiles(scores: pd.DataFrame, out: str | Path, fmt: str | None = None, points: int = 100, reps: int = 500,
                  confidence: float = 0.95, xlabel: str = "score", title: str | None = None, seed: int | None = 0) -> None:
    """Performance profiles, one curve per method: the fraction of runs (each task weighing the same) scoring
    above tau, with its pointwise stratified bootstrap band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    check_bootstrap(reps, confidence)
    lo, hi = float(scores["score"].min()), float(scores["score"].max())
    pad = 0.05 * (hi - lo) if hi > lo else 1.0
    taus = np.linspace(lo - pad, hi + pad, points)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for method in dict.fromkeys(scores["method"]):
        _, x, _ = score_matrix(scores, method)
        curve, low, high = stats.performance_profile_band(x, taus, reps=reps, confidence=confidence, seed=seed)
        line, = ax.plot(taus, curve, label=method)
        ax.fill_between(taus, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel(f"{xlabel} (τ)")
    ax.set_ylabel("fraction of runs with score > τ")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out, format=fmt)
    plt.close(fig)
