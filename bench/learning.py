"""Learning side by side: Sample Factory 2.1.1 and sfx trained on the same task, reward against env frames
and wall seconds, one figure.

    python -m bench.learning --env=doom_basic [--frames=800000] [--threshold=40] [--seconds=S]
                             [--only=sfx|sf] [--out=DIR] [--sf_flags="..."] [--sfx_flags="..."]
                             [-- extra flags for both frameworks]
    python -m bench.learning --list          # the presets and both command lines of each

Presets (``--env``; each sets both command lines, a default ``--frames`` and ``--threshold``):

- ``doom_basic``: VizDoom basic.cfg with the throughput bench's settings for both (frameskip 4, conv + LSTM,
  2 workers x 16 envs, batch 2048, rollout/recurrence 32, 128x72, CPU). Sample Factory:
  ``sf_examples.vizdoom.train_vizdoom``; sfx: ``sfx.train``, the same flags (sfx's doom_basic defaults to
  ``--reward_scale=0.01``, the scaling Sample Factory's doom_basic applies inside the env).
- ``cartpole``: CartPole-v1 with each framework's own defaults (Sample Factory: ``sf_examples.train_gym_env
  --env=CartPole-v1``; sfx: ``--env=gym_CartPole-v1``), both ``--device=cpu``.
- ``atari_breakout``, ``atari_pong``: the same game with each framework's own Atari defaults (Sample
  Factory: ``sf_examples.atari.train_atari``, its PPO-style overrides, ``*NoFrameskip-v4``; sfx:
  ``--env=atari_<game> --atari_sticky_actions=False``, the same deterministic v4 protocol), ``--device=cpu``.

The two trainings run one after the other (never together), each in a fresh train dir under ``--out``
(default ``bench/results/learning_<env>_<timestamp>``) and its own working directory, each stopped by
its own ``--train_for_env_steps=--frames`` (and ``--train_for_seconds=--seconds`` if given). Both log
summaries every ``--summaries_sec`` (``--experiment_summaries_interval``; 0 keeps each framework's
default): the threshold crossing is only known to that resolution. Sample Factory runs from
``bench/sf_venv`` (``bash bench/setup_sample_factory.sh``), sfx from this interpreter.

What is compared (read back from each run's own TensorBoard files, ``<train_dir>/<exp>/.summary/0/``):

- reward: the framework's own average episode reward over its last ``--stats_avg`` (100) episodes, in the
  env's raw units. sfx: tag ``reward``, raw (``--reward_scale`` acts in the learner only). Sample Factory:
  ``reward/reward`` for doom and CartPole (the sum of what the env returns, before its ``--reward_scale``),
  times 100 for doom_basic (its env returns scenario reward x 0.01); for Atari
  ``policy_stats/avg_RecordEpisodeStatistics_reward`` (whole-game raw score; its ``reward/reward`` is per
  life and clipped), as sfx's ``reward`` is. Sample Factory writes its average only once the window is
  full (or > 10 episodes after 300 s); sfx writes it from the first episode on.
- frames: the event's step, env frames with frameskip in both (sfx's learner counts samples x
  ``--env_frameskip``; Sample Factory's with ``--summaries_use_frameskip=True``, its default).
- seconds: the event's wall time minus the moment the training was launched (start-up included).

Output: a table (per framework: frames and seconds when its average first reached ``--threshold``, final
average reward, total frames and seconds, training FPS), ``learning_<env>.png`` (reward vs frames, reward
vs seconds) and ``learning_<env>.json`` (the curves and the summary) in the output folder, plus each run's
log. It is a figure, not a test: exit code 0 whether or not a framework reaches the threshold; 1 if a run
crashed (non-zero exit, or killed past ``--seconds`` + ``--grace_sec``), with the tail of its log printed;
130 on Ctrl+C (the running training is stopped, what was logged so far is still reported).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.procs import split_extra, stop_group

REPO_ROOT = Path(__file__).resolve().parent.parent
SF_VENV = REPO_ROOT / "bench" / "sf_venv"
FRAMEWORKS = ("sfx", "sf")
LABELS = {"sfx": "sfx", "sf": "Sample Factory 2.1.1"}
COLORS = {"sfx": "#4c72b0", "sf": "#c44e52"}
SFX_REWARD_TAG = "reward"
# the cumulative frame counter each prints in its log (progress lines while a run goes on)
PROGRESS = {"sfx": re.compile(r"env steps ([\d,]+)"), "sf": re.compile(r"Total num frames: (\d+)")}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Preset:
    """One task: both command lines (minus train dir, experiment and stop rules) and how to read the rewards.

    ``sf_reward_factor`` turns Sample Factory's logged value of ``sf_reward_tag`` into the env's raw units.
    """

    name: str
    description: str
    sf_module: str
    sf_flags: tuple[str, ...]
    sfx_flags: tuple[str, ...]
    frames: int
    threshold: float
    sf_reward_tag: str = "reward/reward"
    sf_reward_factor: float = 1.0
    conversion: str = "none: both log the env's raw episode reward"


DOOM_SETTINGS = ("--env=doom_basic", "--env_frameskip=4", "--use_rnn=True", "--num_workers=2",
                 "--num_envs_per_worker=16", "--num_policies=1", "--batch_size=2048", "--rollout=32",
                 "--recurrence=32", "--res_w=128", "--res_h=72", "--wide_aspect_ratio=False", "--device=cpu")


def _atari(game: str, frames: int, threshold: float) -> Preset:
    return Preset(
        name=f"atari_{game}",
        description=f"Atari {game.capitalize()} with each framework's Atari defaults, deterministic v4 protocol",
        sf_module="sf_examples.atari.train_atari",
        sf_flags=(f"--env=atari_{game}", "--device=cpu"),
        sfx_flags=(f"--env=atari_{game}", "--atari_sticky_actions=False", "--device=cpu"),
        frames=frames, threshold=threshold,
        sf_reward_tag="policy_stats/avg_RecordEpisodeStatistics_reward",
        conversion=("none: both log the whole-game raw score (SF: gymnasium's RecordEpisodeStatistics, innermost "
                    "wrapper, under its per-life EpisodicLifeEnv and ClipRewardEnv; sfx: per-game statistics)"),
    )


PRESETS: dict[str, Preset] = {p.name: p for p in [
    Preset(
        name="doom_basic",
        description="VizDoom basic, conv + GRU, 2 workers x 16 envs, batch 2048, CPU",
        sf_module="sf_examples.vizdoom.train_vizdoom",
        sf_flags=DOOM_SETTINGS,
        # the same command line: sfx's doom_basic applies Sample Factory's 0.01 reward scale by default; and the
        # same frames: Sample Factory plays its own copy of basic.cfg, which renders the HUD and no decals or
        # particles (VizDoom's bundled basic.cfg, sfx's, the opposite)
        sfx_flags=DOOM_SETTINGS + ("--doom_render=hud=on,decals=off,particles=off",),
        frames=800_000, threshold=40.0,
        sf_reward_factor=100.0,
        conversion=("Sample Factory x 100: its doom_basic env is wrapped in RewardScalingWrapper(0.01) and its "
                    "episode reward sums what the env returns; sfx logs the raw scenario reward"),
    ),
    Preset(
        name="cartpole",
        description="CartPole-v1 with each framework's defaults",
        sf_module="sf_examples.train_gym_env",
        sf_flags=("--env=CartPole-v1", "--device=cpu"),
        sfx_flags=("--env=gym_CartPole-v1", "--device=cpu"),
        frames=500_000, threshold=475.0,
    ),
    _atari("breakout", 2_000_000, 10.0),
    _atari("pong", 10_000_000, 0.0),
]}
PRESET_ALIASES = {"gym_CartPole-v1": "cartpole", "CartPole-v1": "cartpole"}


# --------------------------------------------------------------------------- command lines

def parse_learning_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Flags of the bench; what follows ``--`` goes to both frameworks, after the preset's flags."""
    p = argparse.ArgumentParser(prog="python -m bench.learning", description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="doom_basic",
                   help=f"preset (%(default)s): {', '.join(PRESETS)} (aliases: {', '.join(PRESET_ALIASES)}); "
                        f"--list shows them")
    p.add_argument("--frames", type=float, default=None, help="env frames per training (default: the preset's)")
    p.add_argument("--seconds", type=float, default=None, help="also stop each training after this many seconds")
    p.add_argument("--threshold", type=float, default=None,
                   help="average reward (raw units) whose first crossing is reported (default: the preset's)")
    p.add_argument("--only", choices=FRAMEWORKS, action="append", help="run only this framework (repeatable)")
    p.add_argument("--out", default=None, help="output folder (default bench/results/learning_<env>_<timestamp>)")
    p.add_argument("--summaries_sec", type=int, default=5,
                   help="--experiment_summaries_interval for both, default %(default)s (0 = each framework's own)")
    p.add_argument("--sf_flags", default="", help="extra flags for Sample Factory only (one string, shell-split)")
    p.add_argument("--sfx_flags", default="", help="extra flags for sfx only (one string, shell-split)")
    p.add_argument("--sf_python", default=str(SF_VENV / "bin" / "python"),
                   help="python of the Sample Factory venv (%(default)s)")
    p.add_argument("--sfx_python", default=sys.executable, help="python that runs sfx.train (%(default)s)")
    p.add_argument("--grace_sec", type=float, default=600.0,
                   help="with --seconds: a run still alive this long past it (%(default)s s) is killed, "
                        "counted as crashed")
    p.add_argument("--progress_sec", type=float, default=30.0, help="seconds between progress lines (%(default)s)")
    p.add_argument("--list", action="store_true", help="print the presets and their command lines, then exit")
    argv, extra = split_extra(list(sys.argv[1:] if argv is None else argv))
    args = p.parse_args(argv)
    args.extra = extra
    if args.list:
        return args
    args.env = PRESET_ALIASES.get(args.env, args.env)
    if args.env not in PRESETS:
        p.error(f"--env={args.env}: no such preset; known: {', '.join(PRESETS)}")
    preset = PRESETS[args.env]
    args.frames = int(preset.frames if args.frames is None else args.frames)
    if args.frames <= 0:
        p.error(f"--frames={args.frames} must be positive")
    if args.seconds is not None and args.seconds <= 0:
        p.error(f"--seconds={args.seconds} must be positive")
    if args.summaries_sec < 0:
        p.error(f"--summaries_sec={args.summaries_sec} must be >= 0")
    if args.threshold is None:
        args.threshold = preset.threshold
    args.only = list(dict.fromkeys(args.only or FRAMEWORKS))
    return args


def stop_flags(args: argparse.Namespace) -> list[str]:
    """Stop rules and summary period, flag names shared by both (Sample Factory wants whole seconds)."""
    flags = [f"--train_for_env_steps={args.frames}"]
    if args.seconds is not None:
        flags.append(f"--train_for_seconds={math.ceil(args.seconds)}")
    if args.summaries_sec:
        flags.append(f"--experiment_summaries_interval={args.summaries_sec}")
    return flags


def build_command(framework: str, preset: Preset, args: argparse.Namespace, train_dir: Path,
                  experiment: str) -> list[str]:
    """The full command line of one training: preset flags, then the bench's, then the user's extras."""
    own = shlex.split(args.sf_flags if framework == "sf" else args.sfx_flags)
    if framework == "sf":
        head = [args.sf_python, "-m", preset.sf_module, *preset.sf_flags]
    else:
        head = [args.sfx_python, "-m", "sfx.train", *preset.sfx_flags]
    return [*head, f"--train_dir={train_dir}", f"--experiment={experiment}", *stop_flags(args), *args.extra, *own]


def child_env(framework: str) -> dict[str, str]:
    """sfx: this repository importable. Sample Factory: its venv alone, no W&B."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    if framework == "sf":
        for k in ("PYTHONPATH", "VIRTUAL_ENV"):
            env.pop(k, None)
        env["WANDB_MODE"] = "disabled"
    else:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


# --------------------------------------------------------------------------- running

def _tail(path: Path, lines: int = 30) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64_000))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(ANSI.sub("", text).splitlines()[-lines:])


def _last_progress(path: Path, pattern: re.Pattern) -> str:
    for line in reversed(_tail(path, 200).splitlines()):
        m = pattern.search(line)
        if m:
            return f"{int(m.group(1).replace(',', '')):,} frames"
    return "no frames yet"


def run_training(framework: str, cmd: list[str], cwd: Path, log_path: Path, time_limit: float | None,
                 progress_sec: float) -> dict[str, Any]:
    """Run one training to its end, its output into ``log_path``. Returns status (done / crashed /
    interrupted), exit code, launch and end times (epoch seconds)."""
    cwd.mkdir(parents=True, exist_ok=True)  # VizDoom writes _vizdoom.ini into the working directory
    print(f"[{LABELS[framework]}] {shlex.join(cmd)}\n  log: {log_path}", flush=True)
    started = time.time()
    status, reason, rc = "done", "", None
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=child_env(framework), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        last_print = time.monotonic()
        try:
            while True:
                try:
                    rc = proc.wait(timeout=1.0)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if time_limit is not None and time.time() - started > time_limit:
                    status, reason = "crashed", f"still running {time_limit:.0f} s after launch; killed"
                    stop_group(proc, wait_sec=60.0)
                    rc = proc.returncode
                    break
                if time.monotonic() - last_print >= progress_sec:
                    last_print = time.monotonic()
                    print(f"  {time.time() - started:7.0f} s: {_last_progress(log_path, PROGRESS[framework])}",
                          flush=True)
        except KeyboardInterrupt:
            status, reason = "interrupted", "Ctrl+C"
            stop_group(proc, wait_sec=60.0)
            rc = proc.returncode
        finally:
            stop_group(proc, wait_sec=0.0)  # the group's leftovers (VizDoom engines) after a normal exit too
    ended = time.time()
    if status == "done" and rc != 0:
        status, reason = "crashed", f"exit code {rc}"
    return {"status": status, "reason": reason, "returncode": rc, "start_time": started, "end_time": ended,
            "wall_sec": ended - started, "log": str(log_path), "command": cmd}


# --------------------------------------------------------------------------- reading the curves

@dataclass
class Curve:
    """Average episode reward (raw units) against env frames and seconds since launch, in logged order."""

    frames: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)
    # per point: was it an average over a full window of episodes (empty: all were)
    full: list[bool] = field(default_factory=list)
    start_time: float = 0.0

    def to_dict(self) -> dict[str, list]:
        return {"frames": self.frames, "seconds": self.seconds, "reward": self.reward}


def read_events(summary_dir: str | os.PathLike) -> dict[str, list[tuple[int, float, float]]]:
    """``{tag: [(step, wall_time, value), ...]}`` of every scalar under ``summary_dir`` ({} if it is missing)."""
    if not Path(summary_dir).is_dir():
        return {}
    from sfx_tb.scalars import read_scalar_events

    return read_scalar_events(summary_dir)


def read_curve(events: dict[str, list[tuple[int, float, float]]], tag: str, factor: float,
               start_time: float) -> Curve:
    """The ``tag`` series times ``factor``, seconds counted from ``start_time``, in wall-time order."""
    curve = Curve(start_time=start_time)
    for step, wall, value in sorted(events.get(tag, []), key=lambda e: (e[1], e[0])):
        curve.frames.append(int(step))
        curve.seconds.append(wall - start_time)
        curve.reward.append(value * factor)
    return curve


def sf_reward_factor(preset: Preset, sf_config: dict[str, Any] | None) -> tuple[float, str]:
    """Factor from Sample Factory's logged value to raw units, and the sentence that says why.

    In Sample Factory's default (non-batched) sampler the episode reward is summed before
    ``--reward_scale``; its batched sampler sums after scaling and clipping, so that scale is undone too.
    """
    factor, note = preset.sf_reward_factor, preset.conversion
    if sf_config and sf_config.get("batched_sampling") and preset.sf_reward_tag == "reward/reward":
        scale = float(sf_config.get("reward_scale", 1.0))
        if scale != 1.0:
            factor /= scale
            note += (f"; and / {scale:g}: Sample Factory's batched sampler sums rewards after --reward_scale "
                     f"(and --reward_clip, which cannot be undone)")
    return factor, note


def first_crossing(curve: Curve, threshold: float) -> int | None:
    """Index of the first logged average at or above ``threshold`` over a full window of episodes; None
    if it never gets there."""
    full = curve.full or [True] * len(curve.reward)
    return next((i for i, (r, f) in enumerate(zip(curve.reward, full)) if f and r >= threshold), None)


def mark_full_windows(curve: Curve, events: dict[str, list[tuple[int, float, float]]], stats_avg: int) -> None:
    """sfx writes ``reward`` from its first episode on, over a part-filled window (Sample Factory waits for
    a full one): mark the points logged once ``stats_avg`` episodes had ended (sfx's ``episodes`` scalar,
    written with them), so that a lucky first few episodes do not count as reaching the threshold."""
    if not events.get("episodes"):  # written by an sfx older than that scalar: every point counts
        curve.full = []
        return
    ended = {(step, round(wall, 3)): value for step, wall, value in events.get("episodes", [])}
    counts = sorted((wall, value) for _, wall, value in events.get("episodes", []))
    curve.full = []
    for frames, seconds in zip(curve.frames, curve.seconds):
        wall = seconds + curve.start_time
        n = ended.get((frames, round(wall, 3)))
        if n is None:  # no point written together: the latest count logged up to then
            n = max((v for w, v in counts if w <= wall + 1e-3), default=0.0)
        curve.full.append(n >= stats_avg)


def training_fps(events: dict[str, list[tuple[int, float, float]]]) -> float:
    """Frames per second between the first and last logged points with frames (start-up excluded)."""
    points = sorted((wall, step) for series in events.values() for step, wall, _ in series if step > 0)
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return float("nan")
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


def summarize(curve: Curve, events: dict[str, list[tuple[int, float, float]]], threshold: float,
              run: dict[str, Any]) -> dict[str, Any]:
    """The table row of one framework: threshold crossing, final reward, totals, FPS."""
    i = first_crossing(curve, threshold)
    total_frames = max((step for series in events.values() for step, _, _ in series), default=0)
    fps = training_fps(events)
    return {
        "status": run.get("status", "done"),
        "reason": run.get("reason", ""),
        "threshold": threshold,
        "frames_to_threshold": None if i is None else curve.frames[i],
        "seconds_to_threshold": None if i is None else curve.seconds[i],
        "final_reward": curve.reward[-1] if curve.reward else None,
        "max_reward": max(curve.reward) if curve.reward else None,
        "reward_points": len(curve.reward),
        "total_frames": int(total_frames),
        "total_seconds": run.get("wall_sec"),
        "fps": fps if math.isfinite(fps) else None,
    }


def collect(framework: str, preset: Preset, run: dict[str, Any], exp_dir: Path, threshold: float) -> dict[str, Any]:
    """Read one finished (or stopped) run back: its curve in raw units and its summary row."""
    events = read_events(exp_dir / ".summary" / "0")
    if framework == "sf":
        config_path = exp_dir / "config.json"
        config = json.loads(config_path.read_text()) if config_path.exists() else None
        tag, (factor, note) = preset.sf_reward_tag, sf_reward_factor(preset, config)
    else:
        tag, factor, note = SFX_REWARD_TAG, 1.0, "none: sfx logs the env's raw episode reward"
    curve = read_curve(events, tag, factor, run["start_time"])
    if framework == "sfx":
        cfg_path = exp_dir / "cfg.json"
        stats_avg = int(json.loads(cfg_path.read_text()).get("stats_avg", 100)) if cfg_path.exists() else 100
        mark_full_windows(curve, events, stats_avg)
    summary = summarize(curve, events, threshold, run)
    summary.update(reward_tag=tag, reward_factor=factor, conversion=note, train_dir=str(exp_dir),
                   log=run.get("log"), command=run.get("command"))
    if not curve.reward:
        have = ", ".join(sorted(events)) or "no event files"
        summary["note"] = (f"no {tag!r} points (tags: {have})" +
                           ("; Sample Factory writes its average only once --stats_avg episodes have ended, or "
                            "more than 10 after 300 s" if framework == "sf" else ""))
    return {"summary": summary, "curve": curve.to_dict()}


# --------------------------------------------------------------------------- report

def _fmt(x: Any, fmt: str = ",.0f") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return format(x, fmt)


def format_table(results: dict[str, dict[str, Any]], threshold: float) -> str:
    """One row per framework (plain text, aligned)."""
    header = ("framework", "status", f"frames to {threshold:g}", f"seconds to {threshold:g}", "final reward",
              "max reward", "frames", "seconds", "FPS")
    rows = [header]
    for fw, res in results.items():
        s = res["summary"]
        status = s["status"] + (f" ({s['reason']})" if s.get("reason") else "")
        rows.append((LABELS[fw], status, _fmt(s["frames_to_threshold"]), _fmt(s["seconds_to_threshold"], ".0f"),
                     _fmt(s["final_reward"], ".2f"), _fmt(s["max_reward"], ".2f"), _fmt(s["total_frames"]),
                     _fmt(s["total_seconds"], ".0f"), _fmt(s["fps"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def plot(results: dict[str, dict[str, Any]], threshold: float, title: str, path: Path) -> None:
    """Two panels: average reward vs env frames, and vs seconds since launch; the threshold dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
    for ax, x_key, x_label in ((axes[0], "frames", "env frames (frameskip included)"),
                               (axes[1], "seconds", "seconds since launch")):
        for fw, res in results.items():
            c, s = res["curve"], res["summary"]
            if not c.get("reward"):
                continue
            ax.plot(c[x_key], c["reward"], color=COLORS[fw], label=LABELS[fw], lw=1.6)
            crossed = s[f"{x_key}_to_threshold"]
            if crossed is not None:
                ax.axvline(crossed, color=COLORS[fw], ls=":", lw=1)
        ax.axhline(threshold, color="#888888", ls="--", lw=1, label=f"threshold {threshold:g}")
        ax.set_xlabel(x_label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("average episode reward (raw units)")
    axes[0].legend(loc="best", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def list_presets() -> str:
    """Every preset with both command lines (as run, minus train dir, experiment and stop rules)."""
    out = []
    for p in PRESETS.values():
        out.append(f"{p.name}: {p.description} (default --frames={p.frames:,} --threshold={p.threshold:g})\n"
                   f"  Sample Factory: python -m {p.sf_module} {' '.join(p.sf_flags)}\n"
                   f"  sfx:            python -m sfx.train {' '.join(p.sfx_flags)}\n"
                   f"  reward: SF tag {p.sf_reward_tag!r} x {p.sf_reward_factor:g}, sfx tag {SFX_REWARD_TAG!r}; "
                   f"{p.conversion}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_learning_args(argv)
    if args.list:
        print(list_presets())
        return 0
    preset = PRESETS[args.env]
    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    out = Path(args.out or REPO_ROOT / "bench" / "results" / f"learning_{preset.name}_{stamp}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    if "sf" in args.only and not Path(args.sf_python).exists():
        print(f"bench.learning: error: no Sample Factory python at {args.sf_python} "
              f"(bash bench/setup_sample_factory.sh makes bench/sf_venv; or --only=sfx)", file=sys.stderr)
        return 2
    used = [out / f"{fw}_train_dir" for fw in args.only if (out / f"{fw}_train_dir").exists()]
    if used:
        # both frameworks resume an existing experiment folder: a comparison starts from scratch
        print(f"bench.learning: error: {', '.join(map(str, used))} already exist(s); choose a new --out",
              file=sys.stderr)
        return 2
    time_limit = None if args.seconds is None else args.seconds + args.grace_sec
    print(f"bench.learning {preset.name}: {preset.description}; {args.frames:,} frames"
          f"{f' or {args.seconds:g} s' if args.seconds else ''} each, threshold {args.threshold:g}; "
          f"one after the other: {', '.join(LABELS[f] for f in args.only)}; output {out}", flush=True)

    results: dict[str, dict[str, Any]] = {}
    interrupted = False
    for fw in args.only:
        train_dir, experiment = out / f"{fw}_train_dir", f"{preset.name}_{fw}"
        cmd = build_command(fw, preset, args, train_dir, experiment)
        run = run_training(fw, cmd, out / f"{fw}_cwd", out / f"{fw}.log", time_limit, args.progress_sec)
        results[fw] = collect(fw, preset, run, train_dir / experiment, args.threshold)
        s = results[fw]["summary"]
        print(f"  {run['status']}{': ' + run['reason'] if run['reason'] else ''} after {run['wall_sec']:.0f} s; "
              f"{s['reward_points']} reward points, final {_fmt(s['final_reward'], '.2f')}"
              f"{'; ' + s['note'] if s.get('note') else ''}", flush=True)
        if run["status"] == "crashed":
            print("  last lines of its log:\n    " + _tail(Path(run["log"])).replace("\n", "\n    "), flush=True)
        if run["status"] == "interrupted":
            interrupted = True
            break

    print("\nreward conversion to raw units: "
          + "; ".join(f"{LABELS[fw]}: {res['summary']['conversion']}" for fw, res in results.items()))
    print(f"frames: env frames with frameskip (both); seconds: since launch, start-up included; "
          f"FPS: between the first and last logged points; threshold crossing: first logged average >= "
          f"{args.threshold:g} (summaries every {args.summaries_sec or 'default'} s)\n")
    print(format_table(results, args.threshold))
    title = (f"{preset.name}: Sample Factory 2.1.1 vs sfx, {datetime.date.today().isoformat()}, "
             f"{os.cpu_count()} CPUs; average episode reward over each one's last --stats_avg episodes")
    png, js = out / f"learning_{preset.name}.png", out / f"learning_{preset.name}.json"
    plot(results, args.threshold, title, png)
    js.write_text(json.dumps({
        "env": preset.name, "description": preset.description, "date": datetime.datetime.now().isoformat(),
        "frames": args.frames, "seconds": args.seconds, "threshold": args.threshold,
        "summaries_sec": args.summaries_sec, "extra_flags": args.extra, "cpus": os.cpu_count(),
        "runs": results,
    }, indent=1))
    print(f"\nwrote {png}, {js}")
    if interrupted:
        return 130
    return 1 if any(r["summary"]["status"] == "crashed" for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
