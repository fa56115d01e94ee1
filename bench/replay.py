"""Replay's sample efficiency, side by side in one run: queue only, queue + standard, queue + elite.

    python -m bench.replay [--env=cartpole|atari_pong|atari_breakout] [--seeds=0,1,2] [--frames=N]
                           [--threshold=R] [--seconds=S] [--mixes=queue,standard,elite] [--keep_going] [--out=DIR]
                           [-- extra sfx.train flags, after the preset's]

Each mix trains ``python -m sfx.train`` (one after the other, never together) with the preset's flags and
``--replay_parameters`` (none for ``queue``; 50% fresh and 50% from a 1000-trajectory buffer for the
others; ``elite``: the platform's custom buffer with elite sampling over 2 x N candidates, strategy3 and
elite insertion), stopped at ``--threshold`` (``--stop_at_reward``; not with ``--keep_going``, so that
every run's final average is at the same env steps), ``--frames`` or ``--seconds``.
Read back from each run's TensorBoard files: env steps and seconds until the 100-episode average first
reached the threshold, the final average, the training's samples/s (``fps`` over the run: what elite
sampling's feature recomputation costs). Output: a table, ``replay_<env>.png`` (reward vs env steps, one
line per run) and ``replay_<env>.json`` in the output folder. A figure, not a test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.procs import split_extra

REPO_ROOT = Path(__file__).resolve().parents[1]

MIXES = {
    "queue": None,
    "standard": [{"type": "queue", "capacity": 1, "sample_ratio": 0.5},
                 {"type": "standard", "capacity": 1000, "sample_ratio": 0.5}],
    "elite": [{"type": "queue", "capacity": 1, "sample_ratio": 0.5},
              {"type": "custom", "capacity": 1000, "sample_ratio": 0.5, "dist_function": "ln_norm",
               "sample_strategy": "elite_sampling", "lambda_batch_multiplier": 2, "insert_strategy": "elite_insertion",
               "elite_sampling_strategy": "strategy3"}],
}

# env -> (flags, default frames, default threshold)
PRESETS = {
    "cartpole": (["--env=gym_CartPole-v1", "--num_workers=2", "--num_envs_per_worker=8", "--rollout=32",
                  "--batch_size=512", "--use_rnn=False", "--learning_rate=3e-4", "--device=cpu"], 600_000, 400.0),
    "atari_pong": (["--env=atari_pong", "--num_workers=2", "--num_envs_per_worker=8", "--device=cpu"], 2_000_000,
                   -15.0),
    "atari_breakout": (["--env=atari_breakout", "--num_workers=2", "--num_envs_per_worker=8", "--device=cpu"],
                       600_000, 3.0),
}


def scalars(train_dir: Path, experiment: str, tag: str) -> list[tuple[int, float, float]]:
    """(step, wall time, value) of ``tag`` in a run's TensorBoard files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(train_dir / experiment / ".summary" / "0"))
    acc.Reload()
    return [(e.step, e.wall_time, e.value) for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


def first_at(curve: list[tuple[int, float, float]], threshold: float, start: float) -> tuple[int | None, float | None]:
    for step, wall, value in curve:
        if value >= threshold:
            return step, wall - start
    return None, None


def run(mix: str, seed: int, args: argparse.Namespace, out: Path) -> dict:
    flags, _, _ = PRESETS[args.env]
    experiment = f"{mix}_s{seed}"
    cmd = [sys.executable, "-m", "sfx.train", *flags, *args.extra, f"--train_dir={out}", f"--experiment={experiment}",
           f"--seed={seed}", f"--train_for_env_steps={args.frames}", "--experiment_summaries_interval=2"]
    if not args.keep_going:
        cmd.append(f"--stop_at_reward={args.threshold}")
    if args.seconds:
        cmd.append(f"--train_for_seconds={args.seconds}")
    if MIXES[mix]:
        cmd.append(f"--replay_parameters={json.dumps(MIXES[mix])}")
    print(f"[{mix} seed {seed}] {' '.join(cmd[1:])}", flush=True)
    start = time.time()
    with open(out / f"{experiment}.log", "w") as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    reward = scalars(out, experiment, "reward")
    fps = scalars(out, experiment, "fps")
    steps, seconds = first_at(reward, args.threshold, start)
    return {"mix": mix, "seed": seed, "exit_code": code, "steps_to_threshold": steps, "seconds_to_threshold": seconds,
            "final": reward[-1][2] if reward else None, "fps": fps[-1][2] if fps else None,
            "curve": [(s, v) for s, _, v in reward]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", choices=sorted(PRESETS), default="cartpole")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--mixes", default="queue,standard,elite")
    p.add_argument("--frames", type=int, default=None)
    p.add_argument("--threshold", type=float, default=None)
    p.add_argument("--seconds", type=float, default=0.0)
    p.add_argument("--keep_going", action="store_true",
                   help="train every run for --frames (final averages at equal env steps), not until --threshold")
    p.add_argument("--out", default=None)
    own, extra = split_extra(sys.argv[1:] if argv is None else list(argv))
    args = p.parse_args(own)
    args.extra = extra
    _, frames, threshold = PRESETS[args.env]
    args.frames = args.frames or frames
    args.threshold = threshold if args.threshold is None else args.threshold
    mixes = args.mixes.split(",")
    unknown = [m for m in mixes if m not in MIXES]
    if unknown:
        p.error(f"--mixes: unknown {unknown}; allowed: {', '.join(MIXES)}")
    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    out = Path(args.out or REPO_ROOT / "bench" / "results" / f"replay_{args.env}_{stamp}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    results = [run(m, int(s), args, out) for s in args.seeds.split(",") for m in mixes]

    print(f"\n{args.env}: env steps (and seconds) until the 100-episode average reached {args.threshold:g}")
    print(f"{'mix':10} {'seed':>4} {'steps to R':>11} {'sec to R':>9} {'final':>8} {'samples/s':>10}")
    for r in results:
        steps = f"{r['steps_to_threshold']:,}" if r["steps_to_threshold"] is not None else "-"
        secs = f"{r['seconds_to_threshold']:.0f}" if r["seconds_to_threshold"] is not None else "-"
        final = f"{r['final']:.1f}" if r["final"] is not None else "-"
        fps = f"{r['fps']:,.0f}" if r["fps"] is not None else "-"
        print(f"{r['mix']:10} {r['seed']:>4} {steps:>11} {secs:>9} {final:>8} {fps:>10}")
    (out / f"replay_{args.env}.json").write_text(json.dumps({"env": args.env, "threshold": args.threshold,
                                                            "results": results}, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    colors = {m: f"C{i}" for i, m in enumerate(MIXES)}
    for r in results:
        if r["curve"]:
            ax.plot([s for s, _ in r["curve"]], [v for _, v in r["curve"]], color=colors[r["mix"]], alpha=0.8,
                    label=r["mix"] if r["seed"] == int(args.seeds.split(",")[0]) else None)
    ax.axhline(args.threshold, color="gray", lw=0.8, ls="--")
    ax.set_xlabel("env steps")
    ax.set_ylabel("reward (100-episode average)")
    ax.set_title(f"{args.env}: replay mixes")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"replay_{args.env}.png", dpi=100)
    print(f"wrote {out / f'replay_{args.env}.png'}, {out / f'replay_{args.env}.json'}")
    return 1 if any(r["exit_code"] not in (0,) for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
