"""Stable-Baselines3 reference runs as experiment folders that ``sfx.tb`` reads: plot and tabulate SB3's curves
beside sfx's with the same tools, in the same units::

    bench/sb3_venv/bin/python bench/sb3_baseline.py --algo=ppo --env=HalfCheetah-v5 \\
        --hyperparams_from=HalfCheetah-v4 --seeds=0,1,2 --out=OUT  # SB3: OUT/sb3_ppo_HalfCheetah-v5.json
    python -m bench.sb3_tb OUT/sb3_ppo_HalfCheetah-v5.json --dir=train_dir  # train_dir/sb3_ppo_halfcheetah-v5_see=N
    python -m sfx.tb plot 'my_sfx_runs*' 'sb3_ppo*' --dir=train_dir
    python -m bench.sb3_tb OUT/sb3_ppo_PongNoFrameskip-v4.json --dir=train_dir  # Atari: x in emulator frames

``bench/sb3_baseline.py`` writes one JSON per run with, per seed, ``curve``: (env steps, mean return of the last
``window`` finished episodes) pairs and ``curve_seconds``: each point's wall seconds from the start of learning.
This writes each seed as an experiment folder (``<dir>/<name>_see=<seed>``, ``--name`` defaults to
``sb3_<algo>_<env>``): ``cfg.json`` (the seed, SB3's algorithm, env, the hyperparameters in effect, the
versions; the JSON it came from is in ``sb3_source.json`` beside it, so seeds run as separate reports group as
one) and TensorBoard events under ``.summary/0`` with the scalar ``reward`` (what sfx logs under that name: the
mean return of the last ``--stats_avg`` = 100 episodes, the same window by default) at step = env steps and wall
time = the run's start + ``curve_seconds`` (so ``sfx.tb plot --x=time`` shows SB3's own seconds).

Atari reports (``frames_per_step`` in the JSON, ``curve_frames`` per seed: SB3 timesteps x the frame skip) are
written with step = emulator frames, sfx's x axis for Atari (its env steps count frames), so SB3 and sfx share one
axis; ``--x_unit=steps`` keeps SB3's timesteps instead. ``cfg.json`` says which (``x_unit``: ``frames`` or
``env_steps``, with ``frames_per_step``). Other reports: step = env steps, as before.

Runs in sfx's environment (torch's TensorBoard writer), never SB3's venv. A folder that exists is replaced only
with ``--overwrite``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

TAG = "reward"
SOURCE_FILE = "sb3_source.json"


class ConvertError(ValueError):
    """A bad input: the message names the file or the value and what is expected."""


def load_report(path: Path) -> dict[str, Any]:
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConvertError(f"{path}: no such file (bench/sb3_baseline.py writes OUT/sb3_<algo>_<env>.json)")
    except json.JSONDecodeError as e:
        raise ConvertError(f"{path}: not JSON ({e})")
    missing = [k for k in ("algo", "env", "seeds") if k not in report]
    if missing:
        raise ConvertError(f"{path}: not a bench/sb3_baseline.py report (missing {', '.join(missing)})")
    for row in report["seeds"]:
        if "seed" not in row or "curve" not in row:
            raise ConvertError(f"{path}: a seed's entry has no 'seed' or 'curve' (keys: {sorted(row)})")
    per_step = report.get("frames_per_step")
    if per_step is not None and (isinstance(per_step, bool) or not isinstance(per_step, int) or per_step < 1):
        raise ConvertError(f"{path}: frames_per_step={per_step!r}, expected a positive integer")
    return report


def x_values(report: dict[str, Any], row: dict[str, Any], x: str) -> tuple[list[int], str]:
    """The curve's x values and their unit: emulator frames for an Atari report (``x='frames'``, the default
    there), else SB3's env steps."""
    steps = [int(step) for step, _ in row["curve"]]
    per_step = report.get("frames_per_step")
    if x == "steps" or per_step is None:
        if x == "frames":
            raise ConvertError(f"--x_unit=frames: the report for {report['env']} has no frames_per_step (not Atari)")
        return steps, "env_steps"
    frames = row.get("curve_frames")
    if frames is None:
        return [s * per_step for s in steps], "frames"
    if len(frames) != len(steps) or any(f != s * per_step for f, s in zip(frames, steps)):
        raise ConvertError(f"seed {row['seed']}: curve_frames do not equal the curve's steps x frames_per_step "
                           f"({per_step})")
    return [int(f) for f in frames], "frames"


def default_name(report: dict[str, Any]) -> str:
    """``sb3_<algo>_<env>`` in lower case, with the characters a folder name should not hold replaced."""
    env = str(report["env"]).replace("/", "-").replace("_", "-")
    return f"sb3_{report['algo']}_{env}".lower()


def write_seed(report: dict[str, Any], row: dict[str, Any], folder: Path, source: Path, start_time: float,
               x: str = "auto") -> int:
    """One seed's experiment folder; returns the number of points written."""
    from torch.utils.tensorboard import SummaryWriter

    xs, unit = x_values(report, row, x)
    cfg = {"seed": row["seed"], "framework": "stable-baselines3", "algo": report["algo"], "env": report["env"],
           "hyperparams_entry": report.get("hyperparams_entry"),
           "hyperparams_effective": report.get("hyperparams_effective"), "n_envs": report.get("n_envs"),
           "normalize": report.get("normalize"), "window": report.get("window"),
           "reward_definition": report.get("reward_definition"), "versions": report.get("versions"),
           "x_unit": unit}
    if report.get("frames_per_step") is not None:
        cfg["frames_per_step"] = report["frames_per_step"]
    folder.mkdir(parents=True)
    (folder / "cfg.json").write_text(json.dumps(cfg, indent=1, default=str))
    # the report it came from, beside cfg.json and not in it: seeds run as separate reports still group as one
    (folder / SOURCE_FILE).write_text(json.dumps({"report": str(source), "seed": row["seed"]}, indent=1))
    seconds = row.get("curve_seconds") or []
    writer = SummaryWriter(str(folder / ".summary" / "0"))
    try:
        for i, ((_, value), step) in enumerate(zip(row["curve"], xs)):
            wall = start_time + float(seconds[i]) if i < len(seconds) else None
            writer.add_scalar(TAG, float(value), step, walltime=wall)
    finally:
        writer.close()
    return len(row["curve"])


def convert(path: Path, out_dir: Path, name: str | None = None, overwrite: bool = False,
            start_time: float | None = None, x: str = "auto") -> list[Path]:
    """Every seed of the report at ``path`` as ``<out_dir>/<name>_see=<seed>``; returns the folders. ``x``:
    ``auto`` (frames for an Atari report, else env steps), ``frames`` or ``steps``."""
    if x not in ("auto", "frames", "steps"):
        raise ConvertError(f"--x_unit={x!r}: auto, frames or steps")
    report = load_report(path)
    for row in report["seeds"]:
        x_values(report, row, x)  # every seed's x checked before any folder is written
    name = name or default_name(report)
    if "/" in name or not name:
        raise ConvertError(f"--name={name!r}: one folder name, without '/'")
    start = path.stat().st_mtime if start_time is None else start_time
    folders = [out_dir / f"{name}_see={row['seed']}" for row in report["seeds"]]
    # every folder checked before any is written: a refusal leaves nothing half converted
    existing = [f for f in folders if f.exists()]
    if existing and not overwrite:
        raise ConvertError(f"{existing[0]} exists (--overwrite replaces it)")
    for row, folder in zip(report["seeds"], folders):
        if folder.exists():
            shutil.rmtree(folder)
        n = write_seed(report, row, folder, path.resolve(), start, x)
        unit = x_values(report, row, x)[1]
        print(f"{folder}: {n} points of {TAG!r} at {unit}, seed {row['seed']}, final {row.get('final')}")
    return folders


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sb3_tb", description=__doc__.split("\n\n")[0])
    p.add_argument("report", type=Path, help="a bench/sb3_baseline.py JSON")
    p.add_argument("--dir", type=Path, default=Path("train_dir"), help="where the experiment folders go")
    p.add_argument("--name", help="folder name before '_see=<seed>' (default: sb3_<algo>_<env>)")
    p.add_argument("--overwrite", action="store_true", help="replace folders that exist")
    p.add_argument("--x_unit", default="auto", choices=("auto", "frames", "steps"),
                   help="the curve's step: auto = emulator frames for an Atari report (sfx's Atari x axis), "
                        "else SB3's env steps")
    args = p.parse_args(argv)
    try:
        convert(args.report, args.dir, args.name, args.overwrite, x=args.x_unit)
    except ConvertError as e:
        print(f"sb3_tb: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
