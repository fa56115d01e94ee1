"""SAC side by side: sfx's ``--algo=SAC`` against Stable-Baselines3's SAC, in one run (figures, not a test).

    python -m bench.sac invertedpendulum [--seeds=0,1,2] [--bar=R] [--max_steps=N] [--out=DIR]  # InvertedPendulum-v5
    python -m bench.sac pendulum [--seeds=0,1,2] [--out=DIR]           # gymnasium Pendulum-v1
    python -m bench.sac halfcheetah [--seeds=0,1,2] [--max_steps=50000] [--bars=500,1000,...] [--parallel]
        [--learner_threads=1 --sb3_threads=1]                           # MuJoCo HalfCheetah-v5

Each task: sfx's SAC with the command line below (:data:`INVERTED_PENDULUM_FLAGS`, the README's and the slow
learning test's; :data:`PENDULUM_FLAGS`), then, when ``bench/sb3_venv`` exists (``bash bench/setup_sb3.sh``),
SB3's SAC through ``bench/sb3_baseline.py`` with the RL Zoo's hyperparameters for the task (Pendulum-v1: the
zoo's entry, learning rate 1e-3 and SB3's defaults; InvertedPendulum-v5: the zoo has no SAC entry, so SB3's
defaults, ``--hyperparams_from=default``, which are the SAC paper's), seeds one after the other, each until the
average of its last 100 training episodes reaches the bar: env steps and seconds to the bar, the final average,
the update-to-data ratio each used (1 gradient step of 256 transitions per env step on both sides). sfx's flags
mirror SB3's: 256x256 ReLU networks, Adam at the same learning rates, tau .005, gamma .99, a learned
temperature towards -dim(A) starting at 1, a 1M-transition buffer, 100 transitions before learning (HalfCheetah:
10,000), no observation normalisation, uniformly random actions until then, one env. Where they cannot match:
sfx's actor acts for a trajectory of 8 steps with the weights of the iteration before (up to 8 gradient steps old;
SB3's acts after each step with the last one's). SB3 runs on ``--sb3_threads`` torch threads (default: the cores,
torch's own default); sfx's SAC learner takes every core by default.
``halfcheetah`` (:data:`HALFCHEETAH_FLAGS`; SB3 with the zoo's HalfCheetah-v4 entry, learning_starts 10,000 and
SB3's defaults, on HalfCheetah-v5 as sfx's ``mujoco_halfcheetah``): no termination, every episode 1000 steps
ending at the time limit, so no seed stops at a bar: each runs to ``--max_steps`` (default 50,000, a prefix of the
zoo's 1M) and the figures are the env steps and seconds until the average of the last 10 finished episodes
(``--stats_avg=10`` / ``--window=10``: a 100-episode window would span 100K steps) first reached each of
``--bars`` (default every 500 from 500 to 3000), counted once 10 episodes have finished (:func:`crossings`), the
average, env steps and seconds at the last summary (sfx's seconds from the run's first TensorBoard event, after
the imports; SB3's from ``learn``). ``--parallel``: SB3's seeds run in their own process beside sfx's (two
trainings at a time; SB3's output in ``sb3.log``), so both sides see the same machine load; with
``--learner_threads=1 --sb3_threads=1`` each on one torch thread, for a 2-core machine. ``--collect
--out=DIR``: no training, the table of DIR's runs as they stand (a run cut short shows its last env steps).
Output: a table, ``sac_<task>.json`` and ``sac_<task>.png`` in the output folder.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
from pathlib import Path
from typing import NamedTuple

from bench.r2d2 import REPO_ROOT, SB3_PYTHON, train
from bench.replay import first_at

# The SAC paper's / SB3's settings (SAC's defaults in sfx, spelled out) and the engine's layout: one env, as SB3's
# (the RL Zoo runs SAC on n_envs 1). The two sides then count the same thing: the last 100 *finished* episodes
# average leaves the steps of unfinished episodes out, and with 4 envs that is up to 4 running episodes
# (hundreds of steps once the pole stays up), so more envs reach the bar later in env steps whatever they learn.
# 8-step trajectories (SAC's default): the learner inserts 8 transitions, trains 8 gradient steps and publishes.
# --serial_mode: with one env, sampling is ~5% of the work, and in one process nothing preempts the learner's
# threads (it gets every core, as SAC's learner does by default): InvertedPendulum to 50 in 62 s against 66 s
# in the default process layout and 80 s with one learner thread (README, "SAC").
_COMMON = ["--algo=SAC", "--device=cpu", "--serial_mode=True", "--num_workers=1", "--num_envs_per_worker=1",
           "--worker_num_splits=1",
           "--rollout=8", "--hidden_size=256", "--nonlinearity=relu", "--normalize_input=False", "--batch_size=256",
           "--replay_ratio=256", "--replay_buffer_size=1000000", "--tau=0.005", "--gamma=0.99"]

# MuJoCo's InvertedPendulum-v5 (episodes of up to 1000 steps, +1 per step the pole stays up): a 1-D action,
# learnt by SAC within a few thousand env steps, so it fits CI's slow budget on 2 cores. SB3 defaults (3e-4).
INVERTED_PENDULUM_FLAGS = ["--env=mujoco_invertedpendulum", *_COMMON, "--learning_starts=100",
                           "--actor_learning_rate=3e-4", "--critic_learning_rate=3e-4", "--alpha_learning_rate=3e-4"]
INVERTED_PENDULUM_BAR = 800.0

# gymnasium's Pendulum-v1 (200-step episodes, no termination: every episode ends at the time limit, so every
# 200th transition bootstraps from its stored final observation). The RL Zoo's learning rate 1e-3 (all three).
PENDULUM_FLAGS = ["--env=gym_Pendulum-v1", *_COMMON, "--learning_starts=100", "--actor_learning_rate=1e-3",
                  "--critic_learning_rate=1e-3", "--alpha_learning_rate=1e-3"]
PENDULUM_BAR = -300.0

# MuJoCo's HalfCheetah-v5 (gymnasium's; sfx's mujoco_halfcheetah; SB3 borrows the zoo's HalfCheetah-v4 entry, the
# only one it lists): no termination, every episode is 1000 steps ending at the time limit (each bootstraps from
# its stored final observation). The zoo's entry: learning_starts 10000 (uniformly random actions until then, on
# both sides), SB3's defaults otherwise (3e-4 for all three, the rest in _COMMON). sfx's family default for
# learning_starts is the same 10000; spelled out here. The window: the last 10 finished episodes (10K env steps).
HALFCHEETAH_FLAGS = ["--env=mujoco_halfcheetah", *_COMMON, "--learning_starts=10000", "--actor_learning_rate=3e-4",
                     "--critic_learning_rate=3e-4", "--alpha_learning_rate=3e-4", "--stats_avg=10"]
HALFCHEETAH_BARS = (500.0, 1000.0, 1500.0, 2000.0, 2500.0, 3000.0)  # every 500 up to 3000


class Task(NamedTuple):
    flags: list[str]
    bar: float | None  # the reward that stops a seed (sfx's --stop_at_reward, SB3's --threshold); None: no stop
    gym_id: str  # SB3's env
    hyper_from: str | None  # SB3's --hyperparams_from (None: the zoo's entry for gym_id)
    max_steps: int  # env steps per seed by default
    window: int = 100  # finished episodes the average counts, both sides
    bars: tuple[float, ...] = ()  # rewards whose first crossings are read off the curves (default: (bar,))


TASKS = {"invertedpendulum": Task(INVERTED_PENDULUM_FLAGS, INVERTED_PENDULUM_BAR, "InvertedPendulum-v5", "default",
                                  100_000),
         "pendulum": Task(PENDULUM_FLAGS, PENDULUM_BAR, "Pendulum-v1", None, 60_000),
         "halfcheetah": Task(HALFCHEETAH_FLAGS, None, "HalfCheetah-v5", "HalfCheetah-v4", 50_000, window=10,
                             bars=HALFCHEETAH_BARS)}


def crossings(points: list[tuple[int, float | None, float]], bars: tuple[float, ...] | list[float],
              full_from: int | None) -> dict[float, tuple[int | None, float | None]]:
    """For each bar, ``(env steps, seconds)`` of the first point ``(env steps, seconds, average)`` at or after
    ``full_from`` (the env steps when the window first held its episodes; None: it never did) whose average is at
    least the bar; ``(None, None)`` for a bar never reached there. Points in the order they were taken."""
    out: dict[float, tuple[int | None, float | None]] = {}
    for bar in bars:
        out[bar] = (None, None)
        if full_from is None:
            continue
        for step, secs, value in points:
            if step >= full_from and value >= bar:
                out[bar] = (step, secs)
                break
    return out


def first_full(episodes: list[tuple[int, float, float]], window: int) -> int | None:
    """The env steps of the first ``episodes`` summary (sfx's count of finished episodes) at ``window`` or more."""
    return next((step for step, _, count in episodes if count >= window), None)


def task_bars(task: str, bar: float | None, bars: list[float] | None) -> tuple[float | None, tuple[float, ...]]:
    """(the stopping bar, the bars read off the curves) for ``task`` with the command line's ``--bar`` / ``--bars``."""
    spec = TASKS[task]
    stop = spec.bar if bar is None else bar
    read = tuple(bars) if bars else (spec.bars or ((stop,) if stop is not None else ()))
    return stop, read


def run_task(task: str, seeds: list[int], out: Path, bar: float | None = None,
             max_steps: int | None = None, sb3_threads: int = 1, learner_threads: int = 0,
             bars: list[float] | None = None, parallel: bool = False) -> list[dict]:
    spec = TASKS[task]
    bar, read_bars = task_bars(task, bar, bars)
    max_steps = max_steps or spec.max_steps
    sb3 = None
    if SB3_PYTHON.exists():
        sb3_out = out / "sb3"
        cmd = [str(SB3_PYTHON), str(REPO_ROOT / "bench" / "sb3_baseline.py"), "--algo=sac", f"--env={spec.gym_id}",
               f"--seeds={','.join(map(str, seeds))}", f"--out={sb3_out}", f"--max_steps={max_steps}",
               f"--threads={sb3_threads}", f"--window={spec.window}"] + (
                   [f"--threshold={bar}"] if bar is not None else []) + (
                   [f"--hyperparams_from={spec.hyper_from}"] if spec.hyper_from else [])
        print(" ".join(cmd), flush=True)
        if parallel:  # beside sfx's seeds, its output in a file
            sb3_log = open(out / "sb3.log", "w")
            sb3 = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=sb3_log, stderr=subprocess.STDOUT)
    else:
        print(f"(no {SB3_PYTHON}: run bash bench/setup_sb3.sh for the Stable-Baselines3 rows)")
    rows = []
    for seed in seeds:
        # summaries every 0.1 s: the reward curve's points (where steps to the bar are read) ~8 env steps apart, one
        # trajectory (SB3's side checks its average after every env step; at 0.5 s sfx's crossing read ~20 steps late)
        r = train(spec.flags, out, f"sac_{task}_s{seed}",
                  [f"--seed={seed}", f"--train_for_env_steps={max_steps}", "--experiment_summaries_interval=0.1",
                   f"--learner_main_loop_num_cores={learner_threads}"]
                  + ([f"--stop_at_reward={bar}"] if bar is not None else []))
        steps, secs = first_at(r["reward"], bar, r["start"]) if bar is not None else (None, None)
        rows.append({**sfx_row(out, f"sac_{task}_s{seed}", spec.window, read_bars, r["reward"]), "seed": seed,
                     "steps_to_bar": steps, "seconds_to_bar": secs, "exit_code": r["exit_code"]})
    if SB3_PYTHON.exists():
        if sb3 is None:
            code = subprocess.call(cmd, cwd=REPO_ROOT)
        else:
            code = sb3.wait()
            sb3_log.close()
        rows += sb3_rows(sb3_out, read_bars, code)
    return rows


def sfx_row(out: Path, experiment: str, window: int, bars: tuple[float, ...],
            reward: list[tuple[int, float, float]] | None = None) -> dict:
    """sfx's figures of one run from its TensorBoard files: each bar's crossing, the average, env steps and seconds
    at its last reward summary. Seconds count from the run's first event (its summary writer's start, after the
    imports; SB3's count from ``learn``, after the model's construction)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / experiment / ".summary" / "0"), size_guidance={"scalars": 0})
    acc.Reload()
    t0 = acc.FirstEventTimestamp()
    tags = acc.Tags()["scalars"]
    if reward is None:
        reward = [(e.step, e.wall_time, e.value) for e in acc.Scalars("reward")] if "reward" in tags else []
    episodes = [(e.step, e.wall_time, e.value) for e in acc.Scalars("episodes")] if "episodes" in tags else []
    full = first_full(episodes, window)
    hits = crossings([(s, round(w - t0, 1), v) for s, w, v in reward], bars, full)
    end = reward[-1] if reward else None
    return {"agent": "sfx SAC", "final": end[2] if end else None, "updates_per_step": 1.0,
            "bars": {str(b): list(v) for b, v in hits.items()}, "window_full_at": full,
            "env_steps": end[0] if end else None, "seconds": round(end[1] - t0, 1) if end else None,
            "curve": [(s, v) for s, _, v in reward]}


def sb3_rows(sb3_out: Path, bars: tuple[float, ...], code: int | None) -> list[dict]:
    """SB3's rows from ``bench/sb3_baseline.py``'s JSON (written after each seed)."""
    rows = []
    for path in sorted(sb3_out.glob("*.json")):
        report = json.loads(path.read_text())
        for r in report.get("results", report.get("seeds", [])):
            curve = r.get("curve", [])
            points = [(s, t, v) for (s, v), t in zip(curve, r.get("curve_seconds") or [None] * len(curve))]
            hits = crossings(points, bars, r.get("window_full_at"))
            rows.append({"agent": "SB3 SAC (RL Zoo)", "seed": r.get("seed"), "exit_code": code,
                         "steps_to_bar": r.get("steps_to_threshold"),
                         "seconds_to_bar": r.get("seconds_to_threshold"), "final": r.get("final"),
                         "updates_per_step": (report.get("updates_per_step") or {}).get("ratio"),
                         "bars": {str(b): list(v) for b, v in hits.items()},
                         "window_full_at": r.get("window_full_at"), "env_steps": r.get("env_steps"),
                         "seconds": r.get("seconds"), "curve": curve})
    return rows


def collect(task: str, seeds: list[int], out: Path, bar: float | None,
            bars: list[float] | None) -> list[dict]:
    """The rows of an output folder's runs, finished or not (a run's last summary says how far it got)."""
    spec = TASKS[task]
    bar, read_bars = task_bars(task, bar, bars)
    rows = []
    for seed in seeds:
        if (out / f"sac_{task}_s{seed}" / ".summary" / "0").is_dir():
            row = sfx_row(out, f"sac_{task}_s{seed}", spec.window, read_bars)
            hit = crossings([(s, None, v) for s, v in row["curve"]], (bar,), 0)[bar] if bar is not None else (None,)
            rows.append({**row, "seed": seed, "steps_to_bar": hit[0], "seconds_to_bar": None, "exit_code": None})
    return rows + [r for r in sb3_rows(out / "sb3", read_bars, None) if r["seed"] in seeds]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("task", choices=sorted(TASKS))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--out", default=None)
    p.add_argument("--bar", type=float, default=None, help="the reward to reach (default: the task's)")
    p.add_argument("--bars", default=None,
                   help="comma-separated rewards whose first crossings are read off the curves (default: the "
                        "task's, or --bar)")
    p.add_argument("--parallel", action="store_true",
                   help="run SB3's seeds in their own process beside sfx's (two trainings at a time)")
    p.add_argument("--collect", action="store_true",
                   help="train nothing: the table of --out's runs as they stand (finished or not)")
    p.add_argument("--max_steps", type=int, default=None, help="env steps per seed at most (default: the task's)")
    p.add_argument("--sb3_threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="SB3's torch threads (default: this machine's cores, torch's own default, which the RL Zoo "
                        "keeps)")
    p.add_argument("--learner_threads", type=int, default=0,
                   help="sfx's --learner_main_loop_num_cores (0: every core, SAC's default; on a machine loaded by "
                        "other work 1 avoids oversubscribed threads: 57 env steps/s against 3 at a load of 9 on 2 cores)")
    args = p.parse_args(argv)
    if args.collect and not args.out:
        p.error("--collect reads the runs of --out=DIR")
    seeds = [int(s) for s in args.seeds.split(",")]
    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    out = Path(args.out or REPO_ROOT / "bench" / "results" / f"sac_{args.task}_{stamp}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    bars = [float(b) for b in args.bars.split(",")] if args.bars else None
    if args.collect:
        rows = collect(args.task, seeds, out, args.bar, bars)
    else:
        rows = run_task(args.task, seeds, out, args.bar, args.max_steps, args.sb3_threads, args.learner_threads,
                        bars, args.parallel)
    bar, read_bars = task_bars(args.task, args.bar, bars)
    window = TASKS[args.task].window

    def fmt(v: object, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    if bar is not None:
        print(f"\n{args.task}: env steps and seconds until the last {window} training episodes averaged {bar:g}")
        print(f"{'agent':18} {'seed':>4} {'steps to bar':>13} {'sec to bar':>11} {'final':>8} {'updates/step':>13}")
        for r in rows:
            print(f"{r['agent']:18} {r['seed']:>4} {fmt(r['steps_to_bar'], ',d'):>13} "
                  f"{fmt(r['seconds_to_bar'], '.0f'):>11} {fmt(r['final'], '.1f'):>8} "
                  f"{fmt(r['updates_per_step'], 'g'):>13}")
    print(f"\n{args.task}: env steps (seconds) until the last {window} finished episodes averaged each bar, counted "
          f"from a full window; the average and seconds at the last env steps")
    print(f"{'agent':18} {'seed':>4} " + " ".join(f"{f'to {b:g}':>16}" for b in read_bars)
          + f" {'env steps':>10} {'final':>8} {'seconds':>8} {'steps/s':>8}")
    for r in rows:
        cells = [f"{fmt(r['bars'][str(b)][0], ',d')} ({fmt(r['bars'][str(b)][1], '.0f')})" for b in read_bars]
        rate = r["env_steps"] / r["seconds"] if r.get("env_steps") and r.get("seconds") else None
        print(f"{r['agent']:18} {r['seed']:>4} " + " ".join(f"{c:>16}" for c in cells)
              + f" {fmt(r.get('env_steps'), ',d'):>10} {fmt(r['final'], '.1f'):>8} {fmt(r.get('seconds'), '.0f'):>8}"
              f" {fmt(rate, '.1f'):>8}")
    (out / f"sac_{args.task}.json").write_text(json.dumps({"task": args.task, "bar": bar, "bars": read_bars,
                                                           "window": window, "rows": rows}, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in rows:
        if r["curve"]:
            xs, ys = zip(*r["curve"])
            ax.plot(xs, ys, label=f"{r['agent']} s{r['seed']}")
    for b in read_bars:
        ax.axhline(b, color="grey", linestyle=":")
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"reward (last {window} episodes)")
    ax.legend(fontsize=7)
    fig.savefig(out / f"sac_{args.task}.png", dpi=100, bbox_inches="tight")
    print(f"figures in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
