"""An ablation matrix on sfx's doom_basic learning (issue 29, part 4): each config x each seed through
``bench.learning --only=sfx`` (Sample Factory's doom_basic command line, 800k frames), then one table.

    python -m bench.doom_matrix --out=DIR [--seeds=1,2,3] [--configs=baseline,gae095] [--frames=800000]
    python -m bench.doom_matrix --out=DIR --report     # only the table of what DIR already holds

Configs (changes to ``GENERIC``, the doom family's defaults before 2026-11-27; ``baseline``: today's):
``CONFIGS``; README, "Learning parity", has the table of issue 29. Per config: final average (the last logged
100-episode average), the slope of that average from 400k to 800k frames (reward per 100k frames, a least-squares
line through the points in that range), frames to 40.
Runs one training at a time (``nice -n 10``); a run already in DIR (its JSON exists) is not repeated.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

# The doom family's defaults changed on 2026-11-27 to Sample Factory's APPO (GAE 0.95, value weight, advantages
# per minibatch, basic's 4 actions, one batch ahead): "generic" is the former defaults, the base of every config
# but "baseline" (today's defaults); each config changes that base (README figures before that day: the same)
GENERIC = ("--with_vtrace=True --value_loss_coeff=0.5 --advantage_normalization=auto --doom_action_space=discrete "
           "--batches_ahead=0")

CONFIGS: dict[str, str] = {
    "baseline": "",
    "generic": "",
    "gae095": "--with_vtrace=False --gae_lambda=0.95",
    "vloss1": "--value_loss_coeff=1.0",
    "bf16_off": "--mixed_precision=off",
    "adv_minibatch": "--advantage_normalization=minibatch",
    "actions4": "--doom_action_space=single",
    "excess1": "--traj_buffers_excess_ratio=1.0",
    # Sample Factory 2's doom_basic as a whole: its targets, value weight, advantage scaling and 4 actions
    "sf_all": ("--with_vtrace=False --gae_lambda=0.95 --value_loss_coeff=1.0 --advantage_normalization=minibatch "
               "--doom_action_space=single"),
    "actions4_minibatch": "--doom_action_space=single --advantage_normalization=minibatch",
    # one process, round-robin: the learner trains on the batch its previous weights collected (policy lag ~1,
    # Sample Factory's 1.1 here, against 3 in the asynchronous layout, whose learner sets the pace)
    "serial": "--serial_mode=True",
    "sf_all_excess1": ("--with_vtrace=False --gae_lambda=0.95 --value_loss_coeff=1.0 --advantage_normalization=minibatch "
                       "--doom_action_space=single --traj_buffers_excess_ratio=1.0"),
    # V-trace with IMPALA's lambda (c_i = lambda min(c_bar, rho_i)) at Sample Factory's GAE lambda
    "vtrace095": "--vtrace_lambda=0.95",
    "sf_all_vtrace095": ("--vtrace_lambda=0.95 --value_loss_coeff=1.0 --advantage_normalization=minibatch "
                         "--doom_action_space=single"),
    # the collection gate at one batch ahead (policy lag ~1 in the asynchronous layout)
    "ahead1": "--batches_ahead=1",
    "sf_all_ahead1": ("--with_vtrace=False --gae_lambda=0.95 --value_loss_coeff=1.0 --advantage_normalization=minibatch "
                      "--doom_action_space=single --batches_ahead=1"),
    "sf_all_serial": ("--with_vtrace=False --gae_lambda=0.95 --value_loss_coeff=1.0 --advantage_normalization=minibatch "
                      "--doom_action_space=single --serial_mode=True"),
}


def slope(frames: list[int], reward: list[float], lo: int, hi: int) -> float | None:
    """Least-squares slope of reward against frames in [lo, hi], in reward per 100k frames."""
    pts = [(f, r) for f, r in zip(frames, reward) if lo <= f <= hi]
    if len(pts) < 3:
        return None
    mf = sum(f for f, _ in pts) / len(pts)
    mr = sum(r for _, r in pts) / len(pts)
    var = sum((f - mf) ** 2 for f, _ in pts)
    return 1e5 * sum((f - mf) * (r - mr) for f, r in pts) / var


def one(path: Path, frames: int) -> dict | None:
    """Final, slope 400k-800k (scaled to --frames) and frames to 40 of one finished run, or None."""
    if not path.exists():
        return None
    res = json.loads(path.read_text())["runs"]["sfx"]
    c, s = res["curve"], res["summary"]
    return {"final": s["final_reward"], "slope": slope(c["frames"], c["reward"], frames // 2, frames),
            "to40": s["frames_to_threshold"], "fps": s.get("training_fps")}


def table(out: Path, configs: list[str], seeds: list[int], frames: int) -> str:
    def fmt(xs, f):
        xs = [x for x in xs if x is not None]
        return "-" if not xs else f"{f(statistics.mean(xs))} ({', '.join(f(x) for x in xs)})"

    rows = ["| config | seeds | final avg (mean; per seed) | slope 400k-800k per 100k | frames to 40 |",
            "| --- | --- | --- | --- | --- |"]
    for name in configs:
        runs = {s: one(out / name / f"seed{s}" / "learning_doom_basic.json", frames) for s in seeds}
        done = {s: r for s, r in runs.items() if r}
        if not done:
            continue
        rs = list(done.values())
        never = sum(r["to40"] is None for r in rs)
        to40 = fmt([r["to40"] for r in rs], lambda x: f"{x / 1e3:.0f}k") + (f", {never} never" if never else "")
        rows.append(f"| {name} `{CONFIGS.get(name, '?')}` | {','.join(map(str, done))} | "
                    f"{fmt([r['final'] for r in rs], lambda x: f'{x:.1f}')} | "
                    f"{fmt([r['slope'] for r in rs], lambda x: f'{x:.1f}')} | {to40} |")
    return "\n".join(rows)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.doom_matrix", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--frames", type=int, default=800_000)
    p.add_argument("--extra", default="", help="sfx flags added to every config")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    out, seeds, configs = Path(args.out), [int(s) for s in args.seeds.split(",")], args.configs.split(",")
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        p.error(f"--configs: unknown {unknown}; known: {', '.join(CONFIGS)}")
    if not args.report:
        for seed in seeds:  # seed-major: a cut-short matrix still has every config on the first seeds
            for name in configs:
                run_dir = out / name / f"seed{seed}"
                if (run_dir / "learning_doom_basic.json").exists():
                    continue
                base = "" if name == "baseline" else GENERIC
                flags = " ".join(f"--seed={seed} {base} {CONFIGS[name]} {args.extra}".split())
                cmd = ["nice", "-n", "10", sys.executable, "-m", "bench.learning", "--env=doom_basic", "--only=sfx",
                       f"--frames={args.frames}", f"--out={run_dir}", f"--sfx_flags={flags}"]
                print("#", " ".join(cmd), flush=True)
                subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
                r = one(run_dir / "learning_doom_basic.json", args.frames)
                print(f"{name} seed {seed}: {r}", flush=True)
    print(table(out, configs, seeds, args.frames))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
