"""What evaluation during training costs the training: FPS with and without the evaluator, in one run.

    python -m bench.eval_cost [--seconds=60] [--warmup=15] [--envs=gym_CartPole-v1,doom_basic]

For each env, two trainings one after the other, timed exactly as ``bench.throughput`` times them (the
slope of the learner's consumed env frames over ``--seconds`` after ``--warmup``): without an evaluator,
and with ``--eval_every_env_steps`` (``--eval_every``, frequent on purpose: the evaluator is busy most
of the time, the worst case) and the default ``--eval_episodes`` / ``--eval_num_envs``. doom_basic uses
``bench.throughput``'s sfx training settings; CartPole the README's main-job settings. Printed: FPS
without and with, their ratio, and the evaluations and skipped evaluations the run logged.

Figures only: the machine is shared and noisy, so trust the ratio within one run and run it twice.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from bench.throughput import SFX_COUNTER, child_env, measure_training, training_flags
from bench.throughput_common import format_columns

CARTPOLE_FLAGS = ["--num_workers=2", "--num_envs_per_worker=8", "--device=cpu", "--train_for_seconds=100000",
                  "--save_every_sec=100000"]


def flags_for(env: str, args: argparse.Namespace) -> list[str]:
    if env.startswith("doom_"):
        ns = argparse.Namespace(num_workers=2, num_envs_per_worker=16, batch_size=2048, env=env)
        return [*training_flags(ns), "--hidden_size=512"]
    return [f"--env={env}", *CARTPOLE_FLAGS]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--warmup", type=float, default=15.0)
    p.add_argument("--envs", default="gym_CartPole-v1,doom_basic")
    p.add_argument("--eval_every", type=int, default=20_000, help="--eval_every_env_steps of the runs with it")
    args = p.parse_args(argv)
    rows = [("env", "FPS without", "FPS with evaluator", "with / without", "evaluations", "skipped")]
    with tempfile.TemporaryDirectory(prefix="sfx_eval_cost_") as tmp:
        for env in args.envs.split(","):
            fps = {}
            logs = {}
            for label, extra in (("without", []), ("with", [f"--eval_every_env_steps={args.eval_every}"])):
                workdir = Path(tmp) / f"{env}_{label}"
                workdir.mkdir()
                cmd = [sys.executable, "-m", "sfx.train", *flags_for(env, args), *extra,
                       f"--train_dir={workdir / 'train_dir'}", "--experiment=eval_cost", "--report_every_sec=5"]
                r = measure_training("sfx_train", cmd, SFX_COUNTER, args, workdir, child_env())
                fps[label] = r["fps"]
                log = workdir / "train_dir" / "eval_cost" / "sf_log.txt"
                logs[label] = log.read_text() if log.exists() else ""
                print(f"{env} {label} evaluator: {r['fps']:,.0f} FPS ({r['status']})", flush=True)
            evals = len(re.findall(r"evaluation of policy 0 at", logs["with"]))
            skipped = len(re.findall(r"evaluation due at .* skipped", logs["with"]))
            rows.append((env, f"{fps['without']:,.0f}", f"{fps['with']:,.0f}", f"{fps['with'] / fps['without']:.2f}",
                         str(evals), str(skipped)))
    print(format_columns(rows, "lrrrrr"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
