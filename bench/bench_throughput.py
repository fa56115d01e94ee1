"""Training throughput (samples/s) of sfx's asynchronous mode on a vector env and an image env.

    python -m bench.bench_throughput [--seconds=60] [--num_workers=N] [-- extra sfx.train flags]

Runs, one after the other and each for ``--seconds`` in a fresh temporary train_dir:

- ``gym_CartPole-v1`` (tiny vector observations: the engine's per-sample overhead), the baseline;
- ``bench_image_128x72`` (``bench/image_env.py``: synthetic 128x72 RGB frames that cost almost
  nothing to make, so the figure is the engine's, with image-sized observations and a conv net).

Each run is a full training (``sfx.train.run_training``) in its own Python process, so neither
inherits the other's threads, logging or shared memory. The figure is what ``run_training``
reports as ``samples_per_sec``. A table is printed at the end, image throughput also as a
fraction of the CartPole figure of the same invocation (comparable across machines only loosely).

Figures, not tests: nothing here passes or fails on a number.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

# Registers the bench_image_ family in this process and, because spawned worker processes import
# the parent's main module, in the engine's workers too. SFX_EXTRA_ENV_MODULES (set for each run
# below) is the documented way; this import keeps the bench working where that is not honoured.
import bench.image_env  # noqa: F401
from bench.procs import split_extra
from bench.throughput_common import REPO_ROOT, fmt_count, format_columns, run_json_child, tail, write_result
from bench.throughput_common import child_env as common_child_env

IMAGE_ENV_MODULE = "bench.image_env"

# benchmark name -> env name
BENCHES = {
    "cartpole": "gym_CartPole-v1",
    "image": "bench_image_128x72",
}


def parse_bench_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Arguments after -- are passed to every sfx.train run.")
    parser.add_argument("--seconds", type=int, default=60, help="training time of each run")
    parser.add_argument("--num_workers", type=int, default=os.cpu_count() or 1, help="rollout worker processes")
    parser.add_argument("--cartpole_envs_per_worker", type=int, default=16, help="envs per worker for CartPole")
    parser.add_argument("--image_envs_per_worker", type=int, default=8, help="envs per worker for the image env")
    parser.add_argument("--device", choices=["gpu", "cpu"], default=None,
                        help="learner/inference device (default: gpu when CUDA is available)")
    parser.add_argument("--only", choices=sorted(BENCHES), action="append",
                        help="run only this benchmark (repeatable)")
    parser.add_argument("--verbose", action="store_true", help="show the trainings' own output")
    parser.add_argument("--child_result", help=argparse.SUPPRESS)  # internal: the per-run process
    argv, extra = split_extra(list(sys.argv[1:] if argv is None else argv))
    return parser.parse_args(argv), extra


def child_env() -> dict[str, str]:
    """Environment of a run: the repo importable and the image env family registered in every process."""
    return common_child_env(env_modules=(IMAGE_ENV_MODULE,))


def run_child(train_argv: list[str], result_path: str) -> None:
    """Inside the per-run process: train, then write run_training's result as JSON."""
    from sfx.registries import parse_args
    from sfx.train import run_training

    cfg = parse_args(train_argv)
    result = run_training(cfg)
    write_result(result_path, result)


def run_one(name: str, train_argv: list[str], workdir: Path, seconds: int, verbose: bool) -> dict:
    print(f"running {name}: sfx.train {' '.join(train_argv)}", flush=True)
    run = run_json_child("bench.bench_throughput", [], train_argv, name, workdir, cwd=REPO_ROOT, env=child_env(),
                         timeout=seconds + 600, verbose=verbose)
    if run.result is None:
        last = "" if verbose else tail(run.log_path, 30)
        print(f"{name}: the run failed (exit {run.returncode}); last lines of its output:\n{last}", file=sys.stderr)
        return {"status": "failed", "samples_per_sec": float("nan"), "wall_sec": run.wall_sec}
    return run.result


def format_table(rows: list[dict]) -> str:
    header = ("env", "workers", "envs/worker", "samples/s", "vs CartPole", "status")
    lines = [header]
    baseline = next((r["samples_per_sec"] for r in rows if r["name"] == "cartpole"), None)
    for r in rows:
        sps = r["samples_per_sec"]
        rel = f"{sps / baseline:.2f}x" if baseline and baseline == baseline and sps == sps else "-"
        lines.append((r["env"], str(r["workers"]), str(r["envs_per_worker"]), fmt_count(sps), rel, r["status"]))
    return format_columns(lines, "l" * len(header))


def main(argv: list[str] | None = None) -> int:
    args, extra = parse_bench_args(argv)
    if args.child_result:
        run_child(extra, args.child_result)
        return 0

    device = args.device
    if device is None:
        import torch

        device = "gpu" if torch.cuda.is_available() else "cpu"
    envs_per_worker = {"cartpole": args.cartpole_envs_per_worker, "image": args.image_envs_per_worker}
    names = [n for n in BENCHES if not args.only or n in args.only]
    rows = []
    with tempfile.TemporaryDirectory(prefix="sfx_bench_") as tmp:
        workdir = Path(tmp)
        for name in names:
            train_argv = [f"--env={BENCHES[name]}", f"--experiment=bench_{name}",
                          f"--train_dir={workdir / 'train_dir'}",
                          f"--train_for_seconds={args.seconds}", f"--num_workers={args.num_workers}",
                          f"--num_envs_per_worker={envs_per_worker[name]}", f"--device={device}", *extra]
            result = run_one(name, train_argv, workdir, args.seconds, args.verbose)
            rows.append({"name": name, "env": BENCHES[name], "workers": args.num_workers,
                         "envs_per_worker": envs_per_worker[name],
                         "samples_per_sec": float(result.get("samples_per_sec", float("nan"))),
                         "status": str(result.get("status"))})
    print()
    print(f"sfx throughput, asynchronous mode, {args.seconds} s per run, device={device}, "
          f"{os.cpu_count()} CPU cores")
    print(format_table(rows))
    return 0 if all(r["status"] == "done" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
