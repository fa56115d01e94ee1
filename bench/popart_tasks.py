"""PopArt side by side: the same multi-task training with ``--popart=True`` and ``--popart=False``, each
task's reward against env steps.

    python -m bench.popart_tasks [--steps=300000] [--seed=1] [--envs=flipcart_plain,flipcart_flipped]
                                 [--scales=1,1000] [--out_dir=bench/results] [-- extra sfx.train flags]

Default tasks: ``tests/engine/popart_tasks.py`` (two CartPoles that want opposite actions, each observing a
code for its task) with rewards x1 and x1000, the README's main-job settings (2 workers x 8 envs, batch
512, no RNN). Any ``--envs`` that ``--env=multitask --multitask_envs`` accepts works (e.g.
``atari_pong,atari_breakout`` with ``--scales=1,1``). Prints a table of each task's average reward at
every ~10% of the steps for both runs, and writes ``popart_tasks_<time>.png`` (one panel per task, both
runs) and ``.json`` into ``--out_dir``. Figures only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.procs import split_extra
from bench.throughput_common import REPO_ROOT, format_columns

TASK_MODULE = "tests.engine.popart_tasks"


def train(train_dir: Path, popart: bool, args: argparse.Namespace, extra: list[str]) -> None:
    env = {**os.environ, "SFX_EXTRA_ENV_MODULES": TASK_MODULE, "PYTHONPATH": str(REPO_ROOT)}
    cmd = [sys.executable, "-c", f"import sys, {TASK_MODULE}; from sfx.train import main; sys.exit(main(sys.argv[1:]))",
           "--env=multitask", f"--multitask_envs={args.envs}", f"--multitask_reward_scales={args.scales}",
           f"--popart={popart}", f"--train_for_env_steps={args.steps}", "--num_workers=2", "--num_envs_per_worker=8",
           "--batch_size=512", "--use_rnn=False", "--device=cpu", f"--seed={args.seed}", f"--train_dir={train_dir}",
           "--experiment=run", "--experiment_summaries_interval=2", *extra]
    print(f"[popart={popart}] {' '.join(cmd[3:])}", flush=True)
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        last = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise SystemExit(f"training failed (exit {proc.returncode}):\n{last}")


def task_curves(train_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from sfx_tb import load_scalars

    df = load_scalars(["run"], dir=str(train_dir))
    curves: dict[str, list[tuple[int, float]]] = {}
    for tag, rows in df[df["tag"].str.match(r"^task/.+/reward$")].groupby("tag"):
        name = tag[len("task/"):-len("/reward")]
        curves[name] = [(int(s), float(v)) for s, v in rows.sort_values("step")[["step", "value"]].values]
    return curves


def at(curve: list[tuple[int, float]], step: int) -> float | None:
    """The last value logged at or before ``step``."""
    before = [v for s, v in curve if s <= step]
    return before[-1] if before else None


def main(argv: list[str] | None = None) -> int:
    own, extra = split_extra(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--envs", default="flipcart_plain,flipcart_flipped")
    p.add_argument("--scales", default="1,1000")
    p.add_argument("--out_dir", default=str(REPO_ROOT / "bench" / "results"))
    args = p.parse_args(own)
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="popart_bench_") as tmp:
        for popart in (True, False):
            folder = Path(tmp) / f"popart_{popart}"
            train(folder, popart, args, extra)
            runs[f"popart={popart}"] = task_curves(folder)
    tasks = sorted({t for curves in runs.values() for t in curves})
    header = ["env steps"] + [f"{t} ({r})" for t in tasks for r in runs]
    rows = []
    for k in range(1, 11):
        step = args.steps * k // 10
        row = [f"{step:,}"]
        for t in tasks:
            for r in runs:
                v = at(runs[r].get(t, []), step)
                row.append("-" if v is None else f"{v:,.1f}")
        rows.append(row)
    print(format_columns([header] + rows, "r" * len(header)))
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    (out / f"popart_tasks_{stamp}.json").write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.5), squeeze=False)
    for ax, t in zip(axes[0], tasks):
        for r, curves in runs.items():
            if t in curves:
                ax.plot([s for s, _ in curves[t]], [v for _, v in curves[t]], label=r)
        ax.set_title(t)
        ax.set_xlabel("env steps")
        ax.set_ylabel("average episode reward")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"popart_tasks_{stamp}.png", dpi=100)
    print(f"wrote {out / f'popart_tasks_{stamp}.png'} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
