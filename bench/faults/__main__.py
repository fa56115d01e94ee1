"""``python -m bench.faults``: a real sweep under a seeded fault schedule, then its invariants and report.

    python -m bench.faults --sweep=small --seed=1 --duration_sec=180 --faults=8 --train_dir=/tmp/faults \\
        --report=docs/reliability_run.md

``--sweep``: ``small`` (three CartPole trainings, one with --inference=learner), ``suite`` (two CartPole, one
doom_basic: every fault kind has a target), ``full`` (bench.faults.sweeps:
PBT self-play doom, two ranks, R2D2, SAC with --save_replay_buffer, --inference=learner) or a run
description file. ``--kinds`` / ``--targets`` narrow the schedule; ``--print_schedule`` prints it and exits
(a failing schedule replays from its seed). Exit code 0 when every invariant held, 1 otherwise, 2 on bad input
(one line).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.faults.schedule import KINDS, ROLES, FaultInputError, check_kinds, check_roles, make_schedule


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split("\n\n")[0])
    p.add_argument("--sweep", default="small", help="small | suite | full | a run description file")
    p.add_argument("--steps", type=int, default=200_000,
                   help="the CartPole trainings' --train_for_env_steps (the others' scale with it)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--duration_sec", type=float, default=180.0, help="how long faults keep coming")
    p.add_argument("--faults", type=int, default=len(KINDS))
    p.add_argument("--warmup_sec", type=float, default=30.0, help="no fault before this (trainings starting)")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of: {', '.join(KINDS)}")
    p.add_argument("--targets", default=",".join(ROLES), help=f"for signals, comma-separated, of: {', '.join(ROLES)}")
    p.add_argument("--train_dir", default="/tmp/sfx_faults")
    p.add_argument("--disk_mb", type=int, default=0,
                   help="mount a tmpfs of this size as the train_dir (root only), for the disk_full faults")
    p.add_argument("--end_timeout_sec", type=float, default=900.0,
                   help="after the schedule, how long the sweep may take to finish")
    p.add_argument("--report", default=None, help="write the report (markdown) here too")
    p.add_argument("--print_schedule", action="store_true")
    p.add_argument("runner_args", nargs="*", help="after --: flags for the runner")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    try:
        kinds = check_kinds([k for k in args.kinds.split(",") if k])
        roles = check_roles([r for r in args.targets.split(",") if r])
        schedule = make_schedule(args.seed, args.duration_sec, args.faults, kinds, roles, args.warmup_sec)
    except FaultInputError as e:
        print(f"bench.faults: error: {e}", file=sys.stderr)
        return 2
    if args.print_schedule:
        for f in schedule:
            print(f"{f.at_sec:8.2f} s  {f.describe():28s} pick {f.pick:.3f}  hold {f.hold_sec:g} s")
        return 0
    from bench.faults.inject import Sweep
    from bench.faults.invariants import check_experiment, explain, leaks, report, steps_lost
    from bench.faults.sweeps import run_file_for

    train_dir = Path(args.train_dir)
    try:
        run_file, run_name, runner_args = run_file_for(args.sweep, train_dir, args.steps)
    except FaultInputError as e:
        print(f"bench.faults: error: {e}", file=sys.stderr)
        return 2
    mounted = False
    if args.disk_mb:
        train_dir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.disk_mb}m", "tmpfs", str(train_dir)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"bench.faults: error: cannot mount a {args.disk_mb} MB tmpfs on {train_dir} (--disk_mb needs "
                  f"root): {proc.stderr.strip()}", file=sys.stderr)
            return 2
        mounted = True
        run_file, run_name, runner_args = run_file_for(args.sweep, train_dir, args.steps)  # the run file inside the mount
    sweep = Sweep(str(run_file), train_dir, run_name, runner_args + args.runner_args,
                  # beside the train_dir, not in it: its disk is the one the disk_full faults fill
                  train_dir.parent / f"{train_dir.name}_runner_seed{args.seed}.log")
    try:
        sweep.launch()
        for fault in schedule:
            delay = sweep.t0 + fault.at_sec - time.time()
            if delay > 0:
                time.sleep(delay)
            sweep.apply(fault)
        ended = sweep.wait(args.end_timeout_sec)
        time.sleep(3.0)  # the last processes' exits
        sweep.sample()
        exps = sorted(sweep.observed)
        verdicts = {e: check_experiment(sweep, e) for e in exps}
        cfgs = {}
        for e in exps:
            try:
                cfgs[e] = json.loads((sweep.run_dir / e / "cfg.json").read_text())
            except (OSError, ValueError):
                cfgs[e] = {}
        steps_lost(sweep, verdicts)
        unaccounted = explain(sweep, cfgs)
        leaked = leaks(sweep)
        if not ended:
            leaked.insert(0, f"the sweep did not end within {args.end_timeout_sec:.0f} s after the schedule")
    finally:
        sweep.close()
        if mounted:  # the sweep's files are kept beside the tmpfs, for a look after a failure
            kept = train_dir.with_name(train_dir.name + "_kept")
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(train_dir, kept, symlinks=True, ignore_dangling_symlinks=True, dirs_exist_ok=True)
            subprocess.run(["umount", "-l", str(train_dir)], check=False)
    command = "python -m bench.faults " + shlex.join(argv)
    text = report(sweep, verdicts, leaked, unaccounted, command, args.seed)
    print(text)
    if args.report:
        Path(args.report).write_text(text)
    ok = ended and not leaked and not unaccounted and all(not v.failures for v in verdicts.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
