"""R2D2 side by side, in one run (figures, not a test).

    python -m bench.r2d2 cartpole [--seeds=0,1,2] [--sb3_from=DIR] [--out=DIR]  # sfx R2D2 vs SB3's DQN (RL Zoo)
    python -m bench.r2d2 atari [--env=atari_breakout] [--frames=300000] [--seeds=0] [--out=DIR]  # R2D2 vs APPO
    python -m bench.r2d2 replay [--sequences=1000] [--batch=64]   # what sampling and priority updates cost

``cartpole``: sfx's R2D2 with the README's CartPole command line (:data:`CARTPOLE_FLAGS`) and, when
``bench/sb3_venv`` exists (``bash bench/setup_sb3.sh``), Stable-Baselines3's DQN with the RL Zoo's published
CartPole-v1 hyperparameters (``bench/sb3_baseline.py``), one run after the other, each until the average of
its last 100 training episodes reaches 400 (both with their own exploration: R2D2's epsilon ladder over 16
actors, DQN's schedule down to its final epsilon): env steps and seconds to 400, the final average, and
the update-to-data ratio each used. ``atari``: R2D2 (SEED RL's defaults, on the env family's defaults for
the rest) and APPO (sfx's defaults) for the same env frames: the reward curves and the final average.
``replay``: the prioritized sequence replay's own cost at SEED RL's Atari sizes (84x84x4 uint8 frames,
sequences of 40 + 80 steps): inserting an iteration's sequences, drawing a minibatch with its importance
weights, giving priorities back, against one R2D2 learner step on that minibatch (this machine's CPU).
Output: a table, ``r2d2_<part>.json`` and ``r2d2_<part>.png`` in the output folder (``replay``: the table).
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

from bench.replay import first_at, scalars

REPO_ROOT = Path(__file__).resolve().parents[1]
SB3_PYTHON = REPO_ROOT / "bench" / "sb3_venv" / "bin" / "python"

# The README's CartPole command line for R2D2 (its slow learning test runs it). SEED RL's defaults are for
# Atari over hundreds of millions of frames (replay ratio 1.5, target period 400, n 5, gamma .997); CartPole
# learns in tens of thousands of steps, so these follow the RL Zoo's classic-control DQN practice instead: a
# high update-to-data ratio (8 trained steps per env step), a target network renewed often (every 50 learner
# steps), gamma .99 and a short n (3); sequences of 16 steps after an 8-step burn-in, a 64-wide GRU.
CARTPOLE_FLAGS = ["--algo=R2D2", "--env=gym_CartPole-v1", "--num_workers=2", "--num_envs_per_worker=8",
                  "--rollout=16", "--recurrence=16", "--burn_in=8", "--batch_size=256", "--use_rnn=True",
                  "--rnn_type=gru", "--hidden_size=64", "--replay_ratio=8", "--replay_buffer_size=32000",
                  "--learning_starts=800", "--target_update_period=50", "--learning_rate=1e-3",
                  "--gamma=0.99", "--n_step=3", "--device=cpu"]
CARTPOLE_BAR = 400.0
LOWER_BARS = (150.0, 200.0, 300.0)  # also read off the curves: SB3's DQN (RL Zoo) never averages 400 in training


def train(flags: list[str], out: Path, experiment: str, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "sfx.train", *flags, f"--train_dir={out}", f"--experiment={experiment}",
           "--experiment_summaries_interval=2", *extra]
    print(" ".join(cmd[1:]), flush=True)
    start = time.time()
    with open(out / f"{experiment}.log", "w") as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    reward = scalars(out, experiment, "reward")
    return {"exit_code": code, "start": start, "reward": reward, "fps": scalars(out, experiment, "fps"),
            "seconds": time.time() - start}


def cartpole(args: argparse.Namespace, out: Path) -> list[dict]:
    rows = []
    for seed in args.seeds:
        r = train(CARTPOLE_FLAGS, out, f"r2d2_s{seed}", [f"--seed={seed}", "--train_for_env_steps=300000",
                                                         f"--stop_at_reward={CARTPOLE_BAR}"])
        steps, secs = first_at(r["reward"], CARTPOLE_BAR, r["start"])
        rows.append({"agent": "sfx R2D2", "seed": seed, "steps_to_bar": steps, "seconds_to_bar": secs,
                     "final": r["reward"][-1][2] if r["reward"] else None, "updates_per_step": 8.0,  # --replay_ratio
                     "curve": [(s, v) for s, _, v in r["reward"]], "exit_code": r["exit_code"]})
    if args.sb3_from or SB3_PYTHON.exists():
        sb3_out, code = Path(args.sb3_from or out / "sb3"), 0
        if not args.sb3_from:
            cmd = [str(SB3_PYTHON), str(REPO_ROOT / "bench" / "sb3_baseline.py"), "--algo=dqn", "--env=CartPole-v1",
                   f"--seeds={','.join(map(str, args.seeds))}", f"--threshold={CARTPOLE_BAR}",
                   f"--max_steps={args.sb3_max_steps}", f"--out={sb3_out}"]
            print(" ".join(cmd), flush=True)
            code = subprocess.call(cmd, cwd=REPO_ROOT)
        for path in sorted(sb3_out.glob("sb3_dqn_*.json")):
            report = json.loads(path.read_text())
            utd = report.get("updates_per_step") or {}
            # trained samples per env step: gradient steps per env step x the batch of each
            samples = utd["ratio"] * utd["batch_size"] if utd.get("ratio") and utd.get("batch_size") else None
            for r in report["seeds"]:
                rows.append({"agent": "SB3 DQN (RL Zoo)", "seed": r["seed"], "exit_code": code,
                             "steps_to_bar": r["steps_to_threshold"], "seconds_to_bar": r["seconds_to_threshold"],
                             "final": r["final"], "updates_per_step": samples, "curve": r.get("curve", [])})
    else:
        print(f"(no {SB3_PYTHON}: run bash bench/setup_sb3.sh for the Stable-Baselines3 rows)")
    return rows


def atari(args: argparse.Namespace, out: Path) -> list[dict]:
    rows = []
    base = [f"--env={args.env}", "--num_workers=2", "--num_envs_per_worker=8", "--device=cpu",
            f"--train_for_env_steps={args.frames}"]
    for seed in args.seeds:
        for agent in ("R2D2", "APPO"):
            r = train([f"--algo={agent}", *base], out, f"{agent.lower()}_s{seed}", [f"--seed={seed}"])
            fps = [v for _, _, v in r["fps"] if v > 0]
            rows.append({"agent": f"sfx {agent}", "seed": seed, "final": r["reward"][-1][2] if r["reward"] else None,
                         "env_steps": r["reward"][-1][0] if r["reward"] else 0, "seconds": r["seconds"],
                         "fps": sum(fps) / len(fps) if fps else None, "exit_code": r["exit_code"],
                         "curve": [(s, v) for s, _, v in r["reward"]]})
    return rows


def replay_cost(args: argparse.Namespace) -> dict:
    """Seconds per operation of :class:`~sfx.agents.kit.sequence_replay.PrioritizedSequences` at Atari sizes."""
    import gymnasium
    import torch

    from sfx.agents.base import Batch
    from sfx.agents.r2d2 import R2D2
    from sfx.agents.kit.sequence_replay import PrioritizedSequences
    from sfx.registries import default_cfg

    cfg = default_cfg(env="atari_breakout", algo="R2D2", device="cpu")
    T, B, n_ins = cfg.rollout, cfg.burn_in, R2D2.trajectories_per_iteration(cfg)
    obs_space = gymnasium.spaces.Box(0, 255, (4, 84, 84), "uint8")

    def fresh(actor0: int) -> dict:
        g = torch.Generator().manual_seed(actor0)
        return {"obs": {"obs": torch.randint(0, 255, (n_ins, T + 1, 4, 84, 84), dtype=torch.uint8, generator=g)},
                "rnn_states": torch.zeros(n_ins, T + 1, 512), "actions": torch.zeros(n_ins, T, 1),
                "rewards": torch.rand(n_ins, T, generator=g), "terminated": torch.zeros(n_ins, T, dtype=torch.bool),
                "truncated": torch.zeros(n_ins, T, dtype=torch.bool), "active": torch.ones(n_ins, T, dtype=torch.bool),
                "trunc_q": torch.zeros(n_ins, T), "policy_versions": torch.zeros(n_ins, T, dtype=torch.long),
                "q_taken": torch.rand(n_ins, T, generator=g), "q_max": torch.rand(n_ins, T, generator=g) + 1,
                "epsilon": torch.full((n_ins, T), 0.1),
                "actor_ids": torch.arange(actor0, actor0 + n_ins).reshape(-1, 1).expand(n_ins, T).clone()}

    class Fresh:
        data: dict = {}

        def next_batch(self, version: int) -> Batch:
            d = self.data
            return Batch(data=d, valids=d["active"], fresh=torch.ones(n_ins, dtype=torch.bool),
                         age=torch.zeros(n_ins, T), env_steps=n_ins * T, ids=torch.full((n_ins,), -1))

    src = Fresh()
    store = PrioritizedSequences(src, args.sequences, B, 1, cfg.replay_ratio, lambda: args.batch, 0.9, 0.6, 0.9,
                                 cfg.gamma, cfg.n_step, 1e-3, torch.device("cpu"), seed=0)
    batches = [fresh(k * n_ins) for k in range(4)]  # four groups of actors: most sequences get a burn-in prefix
    for b in range(4):  # each group's next trajectory continues its last one
        batches[b]["obs"]["obs"][:, 0] = batches[b]["obs"]["obs"][:, T]
    inserts, insert = 0, 0.0
    while store.size < args.sequences:
        src.data = batches[inserts % 4]
        t0 = time.perf_counter()
        store.next_batch(0)
        insert += time.perf_counter() - t0
        inserts += 1
    insert /= inserts
    t0 = time.perf_counter()
    for _ in range(10):
        mb, valids = store.sample(args.batch, 0)
    sample = (time.perf_counter() - t0) / 10
    t0 = time.perf_counter()
    for _ in range(10):
        store.update_priorities(mb["ids"], torch.rand(args.batch))
    update = (time.perf_counter() - t0) / 10
    model = R2D2.make_model(cfg, obs_space, gymnasium.spaces.Discrete(4))
    agent = R2D2(cfg, model, torch.device("cpu"))
    agent.store = store
    t0 = time.perf_counter()
    agent.step(mb, valids)
    step = time.perf_counter() - t0
    out = {"sequences": args.sequences, "batch": args.batch, "insert_per_iteration_sec": insert,
           "inserted_per_iteration": n_ins, "sample_sec": sample, "update_priorities_sec": update,
           "learner_step_sec": step, "buffer_gib": sum(v.numel() * v.element_size() for v in
                                                       _leaves(store.data)) / 2 ** 30}
    print(f"R2D2 replay at Atari sizes ({args.sequences} sequences of {B}+{T} steps, {out['buffer_gib']:.2f} GiB; "
          f"minibatch {args.batch}):")
    print(f"  insert {n_ins} sequences (one iteration): {insert * 1e3:8.1f} ms")
    print(f"  sample a minibatch + importance weights: {sample * 1e3:8.1f} ms")
    print(f"  priorities back:                         {update * 1e3:8.1f} ms")
    print(f"  one learner step on it (this CPU):       {step * 1e3:8.1f} ms")
    return out


def _leaves(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from _leaves(v)
    else:
        yield tree


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("part", choices=["cartpole", "atari", "replay"])
    p.add_argument("--sequences", type=int, default=1000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seeds", default=None)
    p.add_argument("--env", default="atari_breakout")
    p.add_argument("--frames", type=int, default=300_000)
    p.add_argument("--out", default=None)
    p.add_argument("--sb3_from", default=None,
                   help="cartpole: a folder with bench/sb3_baseline.py's DQN json of an earlier run (not rerun)")
    p.add_argument("--sb3_max_steps", type=int, default=150_000, help="cartpole: env steps per SB3 seed at most")
    args = p.parse_args(argv)
    args.seeds = [int(s) for s in (args.seeds or ("0,1,2" if args.part == "cartpole" else "0")).split(",")]
    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    out = Path(args.out or REPO_ROOT / "bench" / "results" / f"r2d2_{args.part}_{stamp}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if args.part == "replay":
        (out / "r2d2_replay.json").write_text(json.dumps(replay_cost(args), indent=1))
        return 0
    rows = cartpole(args, out) if args.part == "cartpole" else atari(args, out)

    def fmt(v: object, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    if args.part == "cartpole":
        print(f"\nCartPole-v1: env steps and seconds until the last 100 training episodes averaged {CARTPOLE_BAR:g}")
        print("(trained/step: samples trained on per env step: R2D2's --replay_ratio; DQN's gradient steps per env "
              "step x its batch)")
        print(f"{'agent':20} {'seed':>4} {'steps to 400':>13} {'sec to 400':>11} {'final':>7} {'trained/step':>13}")
        for r in rows:
            print(f"{r['agent']:20} {r['seed']:>4} {fmt(r['steps_to_bar'], ',d'):>13} "
                  f"{fmt(r['seconds_to_bar'], '.0f'):>11} {fmt(r['final'], '.1f'):>7} "
                  f"{fmt(r['updates_per_step'], 'g'):>13}")
        print("\nenv steps until the 100-episode average first reached a lower bar (from the curves; SB3's every ~1000 "
              "steps)")
        print(f"{'agent':20} {'seed':>4} " + " ".join(f"{b:>9g}" for b in LOWER_BARS) + f" {'best':>7}")
        for r in rows:
            firsts = [next((s for s, v in r["curve"] if v >= b), None) for b in LOWER_BARS]
            best = max((v for _, v in r["curve"]), default=None)
            print(f"{r['agent']:20} {r['seed']:>4} " + " ".join(f"{fmt(f, ',d'):>9}" for f in firsts)
                  + f" {fmt(best, '.1f'):>7}")
    else:
        print(f"\n{args.env}: both agents for {args.frames:,} env frames")
        print(f"{'agent':10} {'seed':>4} {'env frames':>11} {'final':>7} {'seconds':>8} {'FPS':>7}")
        for r in rows:
            print(f"{r['agent']:10} {r['seed']:>4} {r['env_steps']:>11,} {fmt(r['final'], '.2f'):>7} "
                  f"{r['seconds']:>8.0f} {fmt(r['fps'], ',.0f'):>7}")
    (out / f"r2d2_{args.part}.json").write_text(json.dumps({"part": args.part, "rows": rows}, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    agents = sorted({r["agent"] for r in rows})
    for r in rows:
        if r["curve"]:
            ax.plot([s for s, _ in r["curve"]], [v for _, v in r["curve"]], color=f"C{agents.index(r['agent'])}",
                    alpha=0.8, label=r["agent"] if r["seed"] == args.seeds[0] else None)
    ax.set_xlabel("env steps")
    ax.set_ylabel("reward (100-episode average)")
    ax.set_title(f"R2D2: {args.part}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"r2d2_{args.part}.png", dpi=100)
    print(f"wrote {out / f'r2d2_{args.part}.png'}, {out / f'r2d2_{args.part}.json'}")
    return 1 if any(r["exit_code"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
