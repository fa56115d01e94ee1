"""``python -m sfx.tb``: TensorBoard over wildcard patterns, learning-curve plots, result tables.

    python -m sfx.tb [serve] PATTERN... [--dir train_dir] [--port 6006] [--refresh_every S] [-q] [--list]
    python -m sfx.tb plot PATTERN... [--metric reward]... [--x env_steps|time] [--spread std|minmax|none]
                          [--smooth W] [--out curves.png] [--format png|svg|pdf]
    python -m sfx.tb table PATTERN... [--metric reward]... [--last_frac 0.1] [--csv out.csv] [--provenance]
    python -m sfx.tb table PATTERN... --per_task [--metric reward]... [--csv out.csv]

Bad input prints one ``sfx.tb: error: ...`` line and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from sfx_tb.errors import TbError

MODES = ("serve", "plot", "table")

PATTERN_HELP = ("shell-style patterns on experiment names, i.e. folder paths relative to --dir "
                "(quote them: '*cartpole*'); a run folder's name selects all its experiments; "
                "comma-separated lists are split")
EPILOG = """modes:
  python -m sfx.tb [serve] PATTERN...   TensorBoard over the matching experiments (this help)
  python -m sfx.tb plot PATTERN...      learning curves over seeds to an image (plot --help)
  python -m sfx.tb table PATTERN...     final results per group of seeds (table --help)
  python -m sfx.tb table PATTERN... --per_task   per task of multi-task trainings
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"sfx.tb: error: {message}\n")


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
        p = _Parser(prog="python -m sfx.tb plot",
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
        return p
    if mode == "table":
        p = _Parser(prog="python -m sfx.tb table",
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


def _run_plot(args: argparse.Namespace) -> int:
    from sfx_tb.curves import output_path, plot_curves
    from sfx_tb.scalars import load_scalars

    metrics = args.metric or ["reward"]
    path, fmt = output_path(args.out, args.format)  # a bad suffix fails before the event files are read
    # wall time counts from a run's first point of any scalar: read them all for --x time
    df = load_scalars(args.patterns, args.dir, metrics=None if args.x == "time" else metrics, policy=args.policy)
    plot_curves(df, metrics, x=args.x, spread=args.spread, smooth=args.smooth, points=args.points,
                title=args.title, out=path, fmt=fmt)
    groups = df["group"].nunique()
    print(f"wrote {path} ({groups} group(s), {df['experiment'].nunique()} experiment(s))")
    return 0


def _run_table(args: argparse.Namespace) -> int:
    from sfx_tb.scalars import load_scalars
    from sfx_tb.table import DEFAULT_LAST_FRAC, check_last_frac, summary_table, to_markdown

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


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: the command line) and run the chosen mode; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    tb_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, tb_args = argv[:cut], argv[cut + 1:]
    mode, rest = _split_mode(argv)
    if tb_args and mode != "serve":
        build_parser(mode).error("arguments after -- are TensorBoard's: only the serve mode takes them")
    args = build_parser(mode).parse_args(rest)
    try:
        if mode == "serve":
            return _run_serve(args, tb_args)
        if mode == "plot":
            return _run_plot(args)
        return _run_table(args)
    except TbError as e:
        print(f"sfx.tb: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `... table | head`
        return 0
    except KeyboardInterrupt:  # Ctrl+C while reading or drawing (the server handles its own)
        return 130
