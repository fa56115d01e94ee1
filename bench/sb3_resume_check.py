"""Check bench/sb3_baseline.py's checkpoint / resume path: a run cut by a kill and resumed equals an uncut run.

    nice -n 10 bench/sb3_venv/bin/python bench/sb3_resume_check.py       # Pong, 2 x 20,480 timesteps (~4-6 min)
    nice -n 10 bench/sb3_venv/bin/python bench/sb3_resume_check.py --steps=8192 --cut=4096   # a quicker one

Three runs of the same seed, one after the other: (1) uncut to ``--steps`` SB3 timesteps; (2) the same with
``--checkpoint_every`` = ``--cut`` timesteps (in frames), killed with SIGKILL as soon as its checkpoint at ``--cut``
is on disk (what the end of a session does to a long run); (3) ``--resume`` of (2) to ``--steps``. It prints the
learning rate and clip range of the updates around the cut (each update's values: SB3 computes them from
``_current_progress_remaining`` = 1 - timesteps / the zoo's n_timesteps, so they must continue across the cut) and
compares (1) with (3): the schedules, the reward curve, the finished games, the emulator frames, the gradient
steps and the final weights (sha256). Exit code 0 when they are equal, 1 otherwise. The cut must be a multiple of
n_envs x n_steps (1024 for the zoo's Atari entry): checkpoints are taken between rollouts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMPARED = ("final", "episodes", "env_steps", "frames", "emulator_frames", "gradient_steps", "curve", "curve_frames",
            "schedule", "window_full_at", "policy_sha256")


def run(cmd: list[str], log: Path) -> int:
    with open(log, "w") as f:
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode


def run_and_cut(cmd: list[str], log: Path, state: Path, cut: int, timeout: float) -> float:
    """Start ``cmd``; SIGKILL it once ``state`` (the checkpoint's state.json) records ``cut`` timesteps."""
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        try:
            while proc.poll() is None and time.perf_counter() - t0 < timeout:
                if state.is_file():
                    try:
                        if json.loads(state.read_text())["num_timesteps"] >= cut:
                            os.kill(proc.pid, signal.SIGKILL)  # our own child, by its id
                            proc.wait()
                            return time.perf_counter() - t0
                    except (json.JSONDecodeError, KeyError):
                        pass  # being written: swapped in whole, so this is a read of the rename's other side
                time.sleep(0.2)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
    raise SystemExit(f"the cut run ended (rc {proc.returncode}) or timed out before a checkpoint at {cut}: see {log}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="PongNoFrameskip-v4")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=40960, help="SB3 timesteps of the whole run")
    p.add_argument("--cut", type=int, default=20480, help="SB3 timesteps of the checkpoint the kill follows")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="default bench/results/sb3_resume_check_<time>")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds the cut run may take to its checkpoint")
    args = p.parse_args(argv)
    out = args.out or HERE / "results" / f"sb3_resume_check_{time.strftime('%Y%m%d_%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, str(HERE / "sb3_baseline.py")]
    common = ["--algo=ppo", f"--env={args.env}", f"--seeds={args.seed}", f"--max_steps={args.steps}",
              f"--threads={args.threads}"]
    name = f"sb3_ppo_{args.env.replace('/', '_')}.json"

    t = time.perf_counter()
    rc = run(base + common + [f"--out={out / 'uncut'}"], out / "uncut.log")
    print(f"uncut: rc {rc}, {time.perf_counter() - t:.0f} s", flush=True)
    cut_cmd = base + common + [f"--out={out / 'cut'}", f"--checkpoint_every={args.cut * 4}"]
    seconds = run_and_cut(cut_cmd, out / "cut.log", out / "cut" / f"checkpoint_seed{args.seed}" / "state.json",
                          args.cut, args.timeout)
    print(f"cut: killed after its checkpoint at {args.cut} timesteps ({seconds:.0f} s)", flush=True)
    t = time.perf_counter()
    rc2 = run(base + [f"--resume={out / 'cut'}"], out / "resume.log")
    print(f"resume: rc {rc2}, {time.perf_counter() - t:.0f} s", flush=True)
    if rc or rc2:
        print(f"a run failed: see {out}/*.log")
        return 1

    uncut = json.loads((out / "uncut" / name).read_text())["seeds"][0]
    resumed = json.loads((out / "cut" / name).read_text())["seeds"][0]
    print("updates around the cut (timesteps, progress remaining, lr, clip_range): uncut | resumed")
    for a, b in zip(uncut["schedule"], resumed["schedule"]):
        if abs(a[0] - args.cut) <= 2048:
            print(f"  {a} | {b}{'  <- the cut' if a[0] == args.cut else ''}")
    print(f"sessions of the resumed run: {resumed['sessions']}")
    differ = [k for k in COMPARED if uncut.get(k) != resumed.get(k)]
    for k in differ:
        print(f"differs: {k}: uncut {str(uncut.get(k))[:200]} | resumed {str(resumed.get(k))[:200]}")
    summary = {"env": args.env, "seed": args.seed, "steps": args.steps, "cut": args.cut, "equal": not differ,
               "differ": differ, "compared": list(COMPARED), "lr_around_cut": [
                   [a, b] for a, b in zip(uncut["schedule"], resumed["schedule"]) if abs(a[0] - args.cut) <= 2048],
               "uncut_seconds": uncut["seconds"], "resumed_seconds": resumed["seconds"],
               "sessions": resumed["sessions"]}
    (out / "resume_check.json").write_text(json.dumps(summary, indent=1))
    print(("equal: the resumed run is the uncut run (" + ", ".join(COMPARED) + ")") if not differ else
          f"NOT equal: {', '.join(differ)}")
    print(f"summary: {out / 'resume_check.json'}")
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main())
