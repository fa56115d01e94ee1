"""``python -m sfx.tb``: TensorBoard over wildcard patterns, learning-curve plots, result tables.

    python -m sfx.tb [serve] PATTERN... [--dir train_dir] [--port 6006] [--refresh_every S] [-q] [--list]
    python -m sfx.tb plot PATTERN... [--metric reward]... [--x env_steps|time] [--spread std|minmax|none]
                          [--smooth W] [--out curves.png] [--format png|svg|pdf]
    python -m sfx.tb table PATTERN... [--metric reward]... [--last_frac 0.1] [--csv out.csv] [--provenance]
    python -m sfx.tb table PATTERN... --per_task [--metric reward]... [--csv out.csv]
    python -m sfx.tb table PATTERN... --aggregate [--eval] [--metric reward] [--normalize auto|none|FILE]
                          [--gamma G] [--method_by KEY,...] [--reps 2000] [--confidence 0.95]
    python -m sfx.tb plot PATTERN... --profile [--eval] [--normalize ...] [--out profiles.png]
    python -m sfx.tb evaluate PATTERN... [--max_num_episodes 10] [--jobs 1] [-- sfx.enjoy flags...]

Bad input prints one ``sfx.tb: error: ...`` line and exits with status 2.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from sfx_tb.errors import TbError

MODES = ("serve", "plot", "table", "evaluate")

PATTERN_HELP = ("shell-style patterns on experiment names, i.e. folder paths relative to --dir "
                "(quote them: '*cartpole*'); a run folder's name selects all its experiments; "
                "comma-separated lists are split")
EPILOG = """modes:
  python -m sfx.tb [serve] PATTERN...   TensorBoard over the matching experiments (this help)
  python -m sfx.tb plot PATTERN...      learning curves over seeds to an image (plot --help)
  python -m sfx.tb table PATTERN...     final results per group of seeds (table --help)
  python -m sfx.tb table PATTERN... --per_task   per task of multi-task trainings
  python -m sfx.tb table PATTERN... --aggregate  IQM, mean, median, optimality gap over seeds and tasks
                                                 with bootstrap CIs; probability of improvement
  python -m sfx.tb plot PATTERN... --profile     performance profiles
  python -m sfx.tb evaluate PATTERN...           python -m sfx.enjoy on each experiment, then the
                                                 aggregate table of the results files (evaluate --help)
"""

AGGREGATE_EPILOG = """aggregates (Agarwal et al. 2021): a run is one policy of one experiment (a seed), a task is its --env, a
method is what its experiments set besides --env and --seed (explicit flags, per run folder; or --method_by).
Per method: the interquartile mean (IQM), mean, median of task means and optimality gap of its runs' scores
over all its tasks, each with a stratified bootstrap percentile CI (runs resampled within each task); between
methods: P(X > Y). Scores are normalised per task where a suite defines them (--normalize=auto: Atari-57 and
DMLab-30 human-normalised, 1 = human) or by your JSON file {"task": [low, high]}.
"""


def _float_in(low: float, high: float, what: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not low < value < high:
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed: use {what}")
        return value
    return parse


def _keys(text: str) -> list[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    if not keys:
        raise argparse.ArgumentTypeError(f"{text!r} names no cfg key: use e.g. learning_rate or algo,use_rnn")
    return keys


def _aggregate_flags(parser: argparse.ArgumentParser, eval_flag: bool = True) -> None:
    if eval_flag:
        parser.add_argument("--eval", action="store_true",
                            help="scores from the evaluation results files (eval_results_p<policy>.json, written by "
                                 "python -m sfx.enjoy or sfx.tb evaluate) instead of the training scalars")
    parser.add_argument("--normalize", default="auto", metavar="auto|none|FILE",
                        help="per-task normalisation: auto (human-normalised where every task has Atari-57 or "
                             "DMLab-30 scores, 1 = human; raw scores otherwise), none, or a JSON file "
                             "{\"task\": [low, high]} giving (score - low) / (high - low) (default: auto)")
    parser.add_argument("--gamma", type=float, default=None,
                        help="the optimality gap's target: mean of max(0, gamma - score) (default: 1 when the scores "
                             "are normalised, else no optimality gap)")
    parser.add_argument("--method_by", type=_keys, default=None, metavar="KEY[,KEY]",
                        help="cfg keys whose values make a method (default: every explicitly given flag but --env "
                             "and --seed, per run folder)")
    parser.add_argument("--reps", type=_positive_int, default=2000,
                        help="bootstrap replicates (default: 2000)")
    parser.add_argument("--confidence", type=_float_in(0, 1, "a level in (0, 1), e.g. 0.95"), default=0.95,
                        help="confidence level of the intervals (default: 0.95)")



# flags of the trainer a user carries over to sfx.tb, and sfx.tb's own name for them
TRAINER_FLAGS = {"--train_dir": "--dir"}


class _Parser(argparse.ArgumentParser):
    """Errors are one line (the bad argument, the nearest flag, where the usage is), not a usage dump."""

    def error(self, message: str) -> NoReturn:
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            first = message[len(prefix):].split()[0]
            name = first.split("=", 1)[0]
            flags = [s for a in self._actions for s in a.option_strings if s.startswith("--") and s != "--help"]
            close = [TRAINER_FLAGS[name]] if name in TRAINER_FLAGS else difflib.get_close_matches(name, flags, n=2,
                                                                                                    cutoff=0.6)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            message = f"unrecognized argument {first!r}{hint}"
        self.exit(2, f"sfx.tb: error: {message}; {self.prog} --help shows the usage\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed: use 1 or more")
    return value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("patterns", nargs="+", metavar="PATTERN", help=PATTERN_HELP)
    parser.add_argument("--dir", default="train_dir",
                        help="train dir holding the experiment folders, maybe inside run folders (default: train_dir)")


def _data_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metric", action="append", default=None,
                        help="scalar tag (reward, len, fps, loss/policy, ...; patterns like 'loss/*' allowed); "
                             "repeat for several (default: reward)")
    parser.add_argument("--policy", type=int, default=None,
                        help="only this policy index (default: every policy; each policy of each seed "
                             "counts as one run)")


def build_parser(mode: str) -> argparse.ArgumentParser:
    """The argument parser of one mode (``serve``, ``plot`` or ``table``)."""
    if mode == "serve":
        p = _Parser(prog="python -m sfx.tb", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                    description="Start TensorBoard with each experiment matching the patterns as a named run "
                                "(<experiment>/<policy>); new matching folders appear without a restart. "
                                "Arguments after -- go to TensorBoard itself.")
        _common(p)
        p.add_argument("--port", type=int, default=6006,
                       help="port to serve on; a busy one is replaced by the next free one; 0 = any free port "
                            "(default: 6006)")
        p.add_argument("--host", default="localhost",
                       help="address to bind (default: localhost; 0.0.0.0 for every interface)")
        p.add_argument("--refresh_every", type=float, default=10.0,
                       help="seconds between looks for new matching folders (default: 10)")
        p.add_argument("-q", "--quiet", action="store_true", help="print only the URL (and warnings)")
        p.add_argument("--list", action="store_true",
                       help="print the matching experiments, their seeds and groups, and exit")
        return p
    if mode == "plot":
        p = _Parser(prog="python -m sfx.tb plot", epilog=AGGREGATE_EPILOG,
                    description="Draw learning curves: per group of experiments that differ only by seed, the "
                                "mean over seeds and its spread; one panel per --metric.")
        _common(p)
        _data_flags(p)
        p.add_argument("--x", default="env_steps", choices=["env_steps", "time"],
                       help="x axis: env steps (the event step) or wall time since each run's start "
                            "(default: env_steps)")
        p.add_argument("--spread", default="std", choices=["std", "minmax", "none"],
                       help="shaded band: +- one std over seeds, min to max, or none (default: std)")
        p.add_argument("--smooth", type=_positive_int, default=1,
                       help="moving average over this many points of each run before averaging (default: 1, off)")
        p.add_argument("--points", type=_positive_int, default=200,
                       help="common x grid the seeds are interpolated onto (default: 200)")
        p.add_argument("--out", default="curves.png", help="image file to write (default: curves.png)")
        p.add_argument("--format", default=None, choices=["png", "svg", "pdf"],
                       help="image format; sets the suffix of --out (default: from --out's suffix)")
        p.add_argument("--title", default=None, help="figure title (default: none)")
        p.add_argument("--profile", action="store_true",
                       help="draw performance profiles instead of curves: per method, the fraction of runs whose "
                            "final score (the first --metric) exceeds tau, with a stratified bootstrap band; "
                            "the aggregate flags below apply")
        p.add_argument("--last_frac", type=float, default=None,
                       help="with --profile: a run's final value is the mean of this last fraction of its points "
                            "(default: 0.1)")
        _aggregate_flags(p)
        return p
    if mode == "table":
        p = _Parser(prog="python -m sfx.tb table", epilog=AGGREGATE_EPILOG,
                    description="One row per group of experiments that differ only by seed: the final value of "
                                "each --metric as mean ± std over seeds, the number of seeds, the env steps "
                                "every seed reached and the FPS. Markdown to stdout; --csv for a file. With "
                                "--per_task: one row per task of each experiment of a multi-task training.")
        _common(p)
        _data_flags(p)
        p.add_argument("--per_task", action="store_true",
                       help="one row per (experiment, task) of multi-task trainings: the last value of "
                            "task/<name>/reward, hns, len, then the suite scores (suite/hns_mean, hns_median, "
                            "hns_mean_capped) per experiment; --metric then names per-task scalars "
                            "(reward, hns, len; default: all)")
        p.add_argument("--last_frac", type=float, default=None,
                       help="a run's final value is the mean of this last fraction of its points "
                            "(default: 0.1; with --per_task: the last point)")
        p.add_argument("--csv", default=None,
                       help="also write the table, unrounded, to this CSV file (with --per_task, the suite "
                            "scores go to <name>_suite.csv beside it)")
        p.add_argument("--provenance", action="store_true",
                       help="also print what each experiment was, from its cfg.json: seed, sfx's git commit "
                            "(+dirty: uncommitted changes), CUDA and package versions")
        p.add_argument("--aggregate", action="store_true",
                       help="one row per method over its seeds and tasks: IQM, mean, median, optimality gap with "
                            "bootstrap CIs, then P(X > Y) between methods (the first --metric; see below)")
        _aggregate_flags(p)
        return p
    if mode == "evaluate":
        p = _Parser(prog="python -m sfx.tb evaluate", epilog=AGGREGATE_EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    description="Evaluate every matching experiment (a final multi-seed, multi-task evaluation): one "
                                "python -m sfx.enjoy --no_render per experiment and policy, which writes its results "
                                "file eval_results_p<policy>.json, then the aggregate table of those files. "
                                "Arguments after -- go to sfx.enjoy (e.g. -- --load_checkpoint_kind=best). "
                                "sfx.tb itself imports no torch: each evaluation is its own process.")
        _common(p)
        p.add_argument("--policy", type=int, default=None,
                       help="only this policy index (default: every policy of each experiment's cfg.json)")
        p.add_argument("--max_num_episodes", type=_positive_int, default=10,
                       help="episodes per evaluation (default: 10)")
        p.add_argument("--deterministic", action="store_true", help="play the action distributions' modes")
        p.add_argument("--device", default="cpu", choices=["cpu", "gpu"],
                       help="where the evaluations run the model (default: cpu)")
        p.add_argument("--jobs", type=_positive_int, default=1, help="evaluations at a time (default: 1)")
        _aggregate_flags(p, eval_flag=False)
        return p
    raise ValueError(f"mode {mode!r}: use one of {', '.join(MODES)}")


def _split_mode(argv: list[str]) -> tuple[str, list[str]]:
    if argv and argv[0] in MODES:
        return argv[0], argv[1:]
    return "serve", argv


def _run_serve(args: argparse.Namespace, tb_args: list[str]) -> int:
    from sfx_tb.experiments import select_experiments
    from sfx_tb.serve import describe, serve

    if args.list:
        experiments, missing = select_experiments(args.patterns, args.dir, on_missing="warn")
        for message in missing:
            print(f"sfx.tb: warning: {message}", file=sys.stderr)
        print(describe(experiments))
        return 0
    return serve(args.patterns, args.dir, port=args.port, host=args.host, refresh_every=args.refresh_every,
                 quiet=args.quiet, tb_args=tb_args)


def _run_plot(args: argparse.Namespace, normalizer: Any = None, normalizer_name: str = "") -> int:
    from sfx_tb.curves import ONE_POINT_WHY, expand_metrics, one_point_metrics, output_path, plot_curves
    from sfx_tb.scalars import load_scalars

    if args.profile:
        from sfx_tb.aggregate import plot_profiles

        path, fmt = output_path(args.out, args.format)
        scores, label, _, notes = _aggregate_scores(args, normalizer, normalizer_name, args.eval)
        _print_notes(notes)
        plot_profiles(scores, path, fmt, points=args.points, reps=min(args.reps, 500), confidence=args.confidence,
                      xlabel=label, title=args.title)
        print(f"wrote {path} ({scores['method'].nunique()} method(s), {scores['task'].nunique()} task(s), "
              f"{len(scores)} run(s))")
        return 0

    metrics = args.metric or ["reward"]
    path, fmt = output_path(args.out, args.format)  # a bad suffix fails before the event files are read
    # wall time counts from a run's first point of any scalar: read them all for --x time
    df = load_scalars(args.patterns, args.dir, metrics=None if args.x == "time" else metrics, policy=args.policy)
    plot_curves(df, metrics, x=args.x, spread=args.spread, smooth=args.smooth, points=args.points,
                title=args.title, out=path, fmt=fmt)
    lonely = one_point_metrics(df, expand_metrics(metrics, df["tag"].unique()))
    if lonely:
        _print_notes([f"{', '.join(lonely)}: {ONE_POINT_WHY}"])
    groups = df["group"].nunique()
    print(f"wrote {path} ({groups} group(s), {df['experiment'].nunique()} experiment(s))")
    return 0


def _print_notes(notes: list[str]) -> None:
    for note in notes:
        print(f"sfx.tb: note: {note}", file=sys.stderr)


def _aggregate_scores(args: argparse.Namespace, normalizer: Any, normalizer_name: str, from_eval: bool,
                      experiment_names: set[str] | None = None) -> tuple[Any, str, float | None, list[str]]:
    """The runs' scores for the aggregate table or the profiles: (scores, what they are, gamma, notes)."""
    from sfx_tb.aggregate import load_ranges, normalize, scores_from_results, scores_from_scalars
    from sfx_tb.experiments import select_experiments
    from sfx_tb.table import DEFAULT_LAST_FRAC, check_last_frac

    experiments, _ = select_experiments(args.patterns, args.dir)
    if experiment_names is not None:
        experiments = [e for e in experiments if e.name in experiment_names]
    if from_eval:
        scores = scores_from_results(experiments, args.method_by, args.policy)
        what = "evaluation return"
    else:
        from sfx_tb.scalars import load_scalars

        metrics = args.metric or ["reward"]
        if len(metrics) > 1 or any(c in metrics[0] for c in "*?["):
            raise TbError(f"--metric {', '.join(metrics)}: aggregates take one scalar; allowed: one tag, e.g. reward")
        last_frac = check_last_frac(DEFAULT_LAST_FRAC if args.last_frac is None else args.last_frac)
        # every tag: multi-task runs score each task by its task/<name>/<metric> scalars
        df = load_scalars(args.patterns, args.dir, policy=args.policy)
        if df.empty:
            raise TbError(f"the selected experiments have no {metrics[0]!r} scalars yet (no event files under their "
                          f".summary/ folders)")
        scores = scores_from_scalars(df, experiments, metrics[0], last_frac, args.method_by)
        what = f"final {metrics[0]}"
    notes = []
    if args.normalize == "none":
        chosen, required = None, False
    elif args.normalize == "auto":
        chosen, required = normalizer, False
    else:
        chosen, required = load_ranges(args.normalize), True
        normalizer_name = f"normalised ({args.normalize})"
    scores, normalised, missing = normalize(scores, chosen, required)
    if missing:
        notes.append(f"raw scores: no suite scores for task(s) {', '.join(missing)} (--normalize=FILE gives your own)")
    label = f"{normalizer_name} {what}" if normalised else what
    gamma = args.gamma if args.gamma is not None else (1.0 if normalised else None)
    return scores, label, gamma, notes


def _print_aggregate(args: argparse.Namespace, scores: Any, label: str, gamma: float | None, notes: list[str]) -> None:
    from sfx_tb.aggregate import aggregate_markdown, aggregate_table, improvement_markdown, improvement_table

    table, more = aggregate_table(scores, gamma, reps=args.reps, confidence=args.confidence)
    better, more2 = improvement_table(scores, reps=args.reps, confidence=args.confidence)
    _print_notes(notes + list(dict.fromkeys(more + more2)))
    gap = f"; optimality gap below {gamma:g}" if gamma is not None else ""
    print(f"{label}: {scores['method'].nunique()} method(s), {scores['task'].nunique()} task(s), {len(scores)} run(s); "
          f"stratified bootstrap, {args.reps} replicates{gap}")
    print(aggregate_markdown(table))
    if len(better):
        print("\nprobability of improvement:")
        print(improvement_markdown(better))
    if getattr(args, "csv", None):
        table.to_csv(args.csv, index=False)
        print(f"wrote {args.csv}", file=sys.stderr)
        if len(better):
            path = Path(args.csv)
            path = path.with_name(f"{path.stem}_improvement{path.suffix or '.csv'}")
            better.to_csv(path, index=False)
            print(f"wrote {path}", file=sys.stderr)


def _run_table(args: argparse.Namespace, normalizer: Any = None, normalizer_name: str = "") -> int:
    from sfx_tb.scalars import load_scalars
    from sfx_tb.table import DEFAULT_LAST_FRAC, check_last_frac, summary_table, to_markdown

    if args.aggregate or args.eval:
        if args.per_task:
            raise TbError("--per_task and --aggregate/--eval do not mix: the aggregate is over tasks already")
        _print_aggregate(args, *_aggregate_scores(args, normalizer, normalizer_name, args.eval))
        return 0
    if args.per_task:
        return _run_per_task_table(args)
    metrics = args.metric or ["reward"]
    last_frac = check_last_frac(DEFAULT_LAST_FRAC if args.last_frac is None else args.last_frac)
    # fps is read as well: the FPS column comes from it
    df = load_scalars(args.patterns, args.dir, policy=args.policy)
    table = summary_table(df, metrics, last_frac=last_frac)
    print(to_markdown(table))
    if args.provenance:
        from sfx_tb.provenance import provenance_table

        print("\nprovenance (cfg.json):\n" + provenance_table(args.patterns, args.dir))
    if args.csv:
        table.to_csv(args.csv, index=False)
        print(f"wrote {args.csv}", file=sys.stderr)
    return 0


def suite_csv_path(csv: str) -> Path:
    """Where ``--per_task --csv FILE`` writes the suite scores: ``<stem>_suite<suffix>`` beside FILE."""
    path = Path(csv)
    return path.with_name(f"{path.stem}_suite{path.suffix or '.csv'}")


def _run_per_task_table(args: argparse.Namespace) -> int:
    from sfx_tb.scalars import load_scalars
    from sfx_tb.table import (check_last_frac, per_task_markdown, per_task_table, split_task_tag, suite_markdown,
                              suite_table)

    if args.last_frac is not None:
        check_last_frac(args.last_frac)
    df = load_scalars(args.patterns, args.dir, policy=args.policy)
    table = per_task_table(df, args.metric, last_frac=args.last_frac)
    suite = suite_table(df, last_frac=args.last_frac)
    without = sorted(set(df["experiment"]) - set(df.loc[df["tag"].map(split_task_tag).notna(), "experiment"]))
    if without:
        print(f"sfx.tb: note: no per-task scalars in {len(without)} experiment(s), left out: {', '.join(without)}",
              file=sys.stderr)
    print(per_task_markdown(table))
    if len(suite):
        print()
        print(suite_markdown(suite))
    if args.csv:
        table.to_csv(args.csv, index=False)
        print(f"wrote {args.csv}", file=sys.stderr)
        if len(suite):
            path = suite_csv_path(args.csv)
            suite.to_csv(path, index=False)
            print(f"wrote {path}", file=sys.stderr)
    return 0


def _run_evaluate(args: argparse.Namespace, enjoy_args: list[str], normalizer: Any, normalizer_name: str) -> int:
    """``python -m sfx.enjoy`` per experiment and policy (its own process: sfx.tb imports no torch), then the
    aggregate table of the results files those evaluations wrote."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from sfx_tb.aggregate import read_results
    from sfx_tb.experiments import select_experiments

    experiments, _ = select_experiments(args.patterns, args.dir)
    jobs = []
    for exp in experiments:
        if exp.cfg is None or not exp.cfg.get("env"):
            _print_notes([f"{exp.name}: no readable cfg.json, not evaluated"])
            continue
        policies = [args.policy] if args.policy is not None else range(int(exp.cfg.get("num_policies") or 1))
        for p in policies:
            command = [sys.executable, "-m", "sfx.enjoy", f"--env={exp.cfg['env']}", f"--experiment={exp.path.name}",
                       f"--train_dir={exp.path.parent}", "--no_render", f"--max_num_episodes={args.max_num_episodes}",
                       f"--policy_index={p}", f"--device={args.device}",
                       *(["--deterministic"] if args.deterministic else []), *enjoy_args]
            jobs.append((exp, p, command))
    if not jobs:
        raise TbError("no selected experiment has a cfg.json to evaluate")

    def run(job: tuple) -> tuple:
        exp, p, command = job
        started = time.time()
        proc = subprocess.run(command, capture_output=True, text=True)
        return exp, p, proc, started

    evaluated, failed = set(), 0
    print(f"evaluating {len(jobs)} policy(ies) of {len({j[0].name for j in jobs})} experiment(s), "
          f"{args.max_num_episodes} episodes each, {args.jobs} at a time", flush=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        for exp, p, proc, started in pool.map(run, jobs):
            path = exp.path / f"eval_results_p{p}.json"
            if proc.returncode == 0 and path.is_file() and path.stat().st_mtime >= started - 1:
                doc = read_results(path)
                mean, std = doc.get("mean_reward"), doc.get("std_reward")
                shown = "no episode finished" if mean is None else f"return {mean:.4g} ± {std:.3g}"
                print(f"{exp.name} policy {p}: {shown} over {doc['episodes']} episodes "
                      f"({doc['env_steps']:,} env steps)", flush=True)
                evaluated.add(exp.name)
            else:
                failed += 1
                lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
                print(f"sfx.tb: error: evaluating {exp.name} policy {p} failed (exit {proc.returncode}): "
                      f"{lines[-1] if lines else 'no output'}", file=sys.stderr, flush=True)
    if evaluated:
        print()
        _print_aggregate(args, *_aggregate_scores(args, normalizer, normalizer_name, True, evaluated))
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None, normalizer: Any = None,
         normalizer_name: str = "normalised") -> int:
    """Parse ``argv`` (default: the command line) and run the chosen mode; returns the exit status.

    ``normalizer``: ``(task, raw score) -> normalised score or None`` for the aggregates' ``--normalize=auto``
    (``python -m sfx.tb`` passes the human-normalised scores of sfx.envs.task_scores; none here: sfx_tb stands
    alone), named ``normalizer_name`` in the output."""
    argv = list(sys.argv[1:] if argv is None else argv)
    tb_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, tb_args = argv[:cut], argv[cut + 1:]
    mode, rest = _split_mode(argv)
    if tb_args and mode not in ("serve", "evaluate"):
        build_parser(mode).error("arguments after -- go to TensorBoard (serve) or sfx.enjoy (evaluate) only")
    args = build_parser(mode).parse_args(rest)
    try:
        if mode == "serve":
            return _run_serve(args, tb_args)
        if mode == "plot":
            return _run_plot(args, normalizer, normalizer_name)
        if mode == "evaluate":
            return _run_evaluate(args, tb_args, normalizer, normalizer_name)
        return _run_table(args, normalizer, normalizer_name)
    except TbError as e:
        print(f"sfx.tb: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `... table | head`
        return 0
    except KeyboardInterrupt:  # Ctrl+C while reading or drawing (the server handles its own)
        return 130
