"""Steps/s of each env family: the env alone (random actions, one process) and through sfx.

    python -m bench.bench_envs [--seconds=30] [--only doom --only atari ...] [-- extra sfx.train flags]

For each family whose ``bench/envs_<family>.py`` exists and whose package is installed:

- *alone*: ``bench_env_alone(seconds)`` of that module steps one env with random actions;
  ``doom_multi`` is a ``doom_duel`` match (2 agents, each a VizDoom process, in lockstep over
  localhost UDP): its steps are agent steps, 2 per match step;
- *sfx*: a full asynchronous training run of the same env (``sfx.train``, the family's defaults,
  ``--num_workers`` workers, plus the module's own ``SFX_ARGS``) for ``--seconds``; its figures are agent steps/s and env frames/s
  collected by the rollout workers (frames = steps x ``--env_frameskip``).

Figures, not tests. On a 2-core machine the sfx run shares the cores between envs, inference and
learning, so "sfx / alone" below 1 is expected there; the ratio is the point of the table.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from pathlib import Path

from bench.bench_throughput import run_one

FAMILIES = ("doom", "doom_multi", "atari", "mujoco", "dmlab")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=30, help="duration of each measurement")
    parser.add_argument("--num_workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--num_envs_per_worker", type=int, default=8)
    parser.add_argument("--only", choices=FAMILIES, action="append", help="only this family (repeatable)")
    args = parser.parse_args(argv)

    rows = []
    with tempfile.TemporaryDirectory(prefix="sfx_bench_envs_") as tmp:
        for family in FAMILIES:
            if args.only and family not in args.only:
                continue
            try:
                module = importlib.import_module(f"bench.envs_{family}")
                alone = module.bench_env_alone(args.seconds)
            except Exception as e:  # a family without its package (DMLab here) is reported, not fatal
                rows.append((family, "-", "-", "-", "-", f"skipped: {type(e).__name__}: {e}"[:80]))
                continue
            env = alone["env"]
            train_argv = [f"--env={env}", f"--experiment=bench_{family}", f"--train_dir={Path(tmp) / 'td'}",
                          f"--train_for_seconds={args.seconds}", f"--num_workers={args.num_workers}",
                          f"--num_envs_per_worker={args.num_envs_per_worker}", "--device=cpu",
                          *getattr(module, "SFX_ARGS", ()), *extra]
            result = run_one(family, train_argv, Path(tmp), args.seconds, verbose=False)
            sps = float(result.get("samples_per_sec", float("nan")))
            ratio = sps / alone["steps_per_sec"] if alone["steps_per_sec"] else float("nan")
            rows.append((family, env, f"{alone['steps_per_sec']:,.0f}", f"{sps:,.0f}",
                         f"{float(result.get('fps', float('nan'))):,.0f}", f"{ratio:.2f}x {result.get('status')}"))
    header = ("family", "env", "alone steps/s", "sfx steps/s", "sfx frames/s", "sfx / alone")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(f"\nenv families, {args.seconds} s each, {args.num_workers} workers x {args.num_envs_per_worker} envs, "
          f"{os.cpu_count()} CPU cores")
    for r in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
