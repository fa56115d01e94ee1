"""SAC side by side: sfx's ``--algo=SAC`` against Stable-Baselines3's SAC, in one run (figures, not a test).

    python -m bench.sac invertedpendulum [--seeds=0,1,2] [--bar=R] [--max_steps=N] [--out=DIR]  # InvertedPendulum-v5
    python -m bench.sac pendulum [--seeds=0,1,2] [--out=DIR]           # gymnasium Pendulum-v1

Each task: sfx's SAC with the command line below (:data:`INVERTED_PENDULUM_FLAGS`, the README's and the slow
learning test's; :data:`PENDULUM_FLAGS`), then, when ``bench/sb3_venv`` exists (``bash bench/setup_sb3.sh``),
SB3's SAC through ``bench/sb3_baseline.py`` with the RL Zoo's hyperparameters for the task (Pendulum-v1: the
zoo's entry, learning rate 1e-3 and SB3's defaults; InvertedPendulum-v5: the zoo has no SAC entry, so SB3's
defaults, ``--hyperparams_from=default``, which are the SAC paper's), seeds one after the other, each until the
average of its last 100 training episodes reaches the bar: env steps and seconds to the bar, the final average,
the update-to-data ratio each used (1 gradient step of 256 transitions per env step on both sides). sfx's flags
mirror SB3's: 256x256 ReLU networks, Adam at the same learning rates, tau .005, gamma .99, a learned
temperature towards -dim(A) starting at 1, a 1M-transition buffer, 100 transitions before learning, no
observation normalisation, uniformly random actions for the first 100 steps, one env. Where they cannot match:
sfx's actor acts for a trajectory of 8 steps with the weights of the iteration before (up to 8 gradient steps old;
SB3's acts after each step with the last one's). SB3 runs on ``--sb3_threads`` torch threads (default: the cores,
torch's own default); sfx's SAC learner takes every core by default.
Output: a table, ``sac_<task>.json`` and ``sac_<task>.png`` in the output folder.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
from pathlib import Path

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
           "--replay_ratio=256", "--replay_buffer_size=1000000", "--learning_starts=100", "--tau=0.005", "--gamma=0.99"]

# MuJoCo's InvertedPendulum-v5 (episodes of up to 1000 steps, +1 per step the pole stays up): a 1-D action,
# learnt by SAC within a few thousand env steps, so it fits CI's slow budget on 2 cores. SB3 defaults (3e-4).
INVERTED_PENDULUM_FLAGS = ["--env=mujoco_invertedpendulum", *_COMMON, "--actor_learning_rate=3e-4",
                           "--critic_learning_rate=3e-4", "--alpha_learning_rate=3e-4"]
INVERTED_PENDULUM_BAR = 800.0

# gymnasium's Pendulum-v1 (200-step episodes, no termination: every episode ends at the time limit, so every
# 200th transition bootstraps from its stored final observation). The RL Zoo's learning rate 1e-3 (all three).
PENDULUM_FLAGS = ["--env=gym_Pendulum-v1", *_COMMON, "--actor_learning_rate=1e-3", "--critic_learning_rate=1e-3",
                  "--alpha_learning_rate=1e-3"]
PENDULUM_BAR = -300.0

TASKS = {"invertedpendulum": (INVERTED_PENDULUM_FLAGS, INVERTED_PENDULUM_BAR, "InvertedPendulum-v5", "default",
                              100_000),
         "pendulum": (PENDULUM_FLAGS, PENDULUM_BAR, "Pendulum-v1", None, 60_000)}


def run_task(task: str, seeds: list[int], out: Path, bar: float | None = None,
             max_steps: int | None = None, sb3_threads: int = 1, learner_threads: int = 0) -> list[dict]:
    flags, default_bar, gym_id, hyper_from, default_steps = TASKS[task]
    bar = default_bar if bar is None else bar
    max_steps = max_steps or default_steps
    rows = []
    for seed in seeds:
        # summaries every 0.1 s: the reward curve's points (where steps to the bar are read) ~8 env steps apart, one
        # trajectory (SB3's side checks its average after every env step; at 0.5 s sfx's crossing read ~20 steps late)
        r = train(flags, out, f"sac_{task}_s{seed}", [f"--seed={seed}", f"--train_for_env_steps={max_steps}",
                                                      f"--stop_at_reward={bar}", "--experiment_summaries_interval=0.1",
                                                      f"--learner_main_loop_num_cores={learner_threads}"])
        steps, secs = first_at(r["reward"], bar, r["start"])
        rows.append({"agent": "sfx SAC", "seed": seed, "steps_to_bar": steps, "seconds_to_bar": secs,
                     "final": r["reward"][-1][2] if r["reward"] else None, "updates_per_step": 1.0,
                     "curve": [(s, v) for s, _, v in r["reward"]], "exit_code": r["exit_code"]})
    if SB3_PYTHON.exists():
        sb3_out = out / "sb3"
        cmd = [str(SB3_PYTHON), str(REPO_ROOT / "bench" / "sb3_baseline.py"), "--algo=sac", f"--env={gym_id}",
               f"--seeds={','.join(map(str, seeds))}", f"--threshold={bar}", f"--out={sb3_out}",
               f"--max_steps={max_steps}", f"--threads={sb3_threads}"] + (
                   [f"--hyperparams_from={hyper_from}"] if hyper_from else [])
        print(" ".join(cmd), flush=True)
        code = subprocess.call(cmd, cwd=REPO_ROOT)
        for path in sorted(sb3_out.glob("*.json")):
            report = json.loads(path.read_text())
            for r in report.get("results", report.get("seeds", [])):
                rows.append({"agent": "SB3 SAC (RL Zoo)", "seed": r.get("seed"), "exit_code": code,
                             "steps_to_bar": r.get("steps_to_threshold"),
                             "seconds_to_bar": r.get("seconds_to_threshold"), "final": r.get("final"),
                             "updates_per_step": (report.get("updates_per_step") or {}).get("ratio"),
                             "curve": r.get("curve", [])})
    else:
        print(f"(no {SB3_PYTHON}: run bash bench/setup_sb3.sh for the Stable-Baselines3 rows)")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("task", choices=sorted(TASKS))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--out", default=None)
    p.add_argument("--bar", type=float, default=None, help="the reward to reach (default: the task's)")
    p.add_argument("--max_steps", type=int, default=None, help="env steps per seed at most (default: the task's)")
    p.add_argument("--sb3_threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="SB3's torch threads (default: this machine's cores, torch's own default, which the RL Zoo "
                        "keeps)")
    p.add_argument("--learner_threads", type=int, default=0,
                   help="sfx's --learner_main_loop_num_cores (0: every core, SAC's default; on a machine loaded by "
                        "other work 1 avoids oversubscribed threads: 57 env steps/s against 3 at a load of 9 on 2 cores)")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    out = Path(args.out or REPO_ROOT / "bench" / "results" / f"sac_{args.task}_{stamp}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    rows = run_task(args.task, seeds, out, args.bar, args.max_steps, args.sb3_threads, args.learner_threads)
    bar = TASKS[args.task][1] if args.bar is None else args.bar

    def fmt(v: object, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    print(f"\n{args.task}: env steps and seconds until the last 100 training episodes averaged {bar:g}")
    print(f"{'agent':18} {'seed':>4} {'steps to bar':>13} {'sec to bar':>11} {'final':>8} {'updates/step':>13}")
    for r in rows:
        print(f"{r['agent']:18} {r['seed']:>4} {fmt(r['steps_to_bar'], ',d'):>13} "
              f"{fmt(r['seconds_to_bar'], '.0f'):>11} {fmt(r['final'], '.1f'):>8} {fmt(r['updates_per_step'], 'g'):>13}")
    (out / f"sac_{args.task}.json").write_text(json.dumps({"task": args.task, "bar": bar, "rows": rows}, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in rows:
        if r["curve"]:
            xs, ys = zip(*r["curve"])
            ax.plot(xs, ys, label=f"{r['agent']} s{r['seed']}")
    ax.axhline(bar, color="grey", linestyle=":")
    ax.set_xlabel("env steps")
    ax.set_ylabel("reward (last 100 episodes)")
    ax.legend(fontsize=7)
    fig.savefig(out / f"sac_{args.task}.png", dpi=100, bbox_inches="tight")
    print(f"figures in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
