"""The results page's figures (docs/results.md), drawn from the measured numbers in docs/figures/data/*.json.

    .venv/bin/python docs/figures/make_figures.py            # writes docs/figures/<name>.svg
    .venv/bin/python docs/figures/make_figures.py --out=DIR  # somewhere else (the docs tests compare the two)

Each JSON file holds one figure's numbers as its measurement recorded them (a benchmark's JSON, or the table
of a dated measurement in the docs, named in its ``source``), its date, machine and commands. Nothing here
computes a result: the script only draws. The SVGs are small (text stays text) and deterministic (no date,
fixed ids), so a stale figure shows up as a diff.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"

SFX, SF, SB3, RAW, SAMPLER = "#3949ab", "#ef6c00", "#2e7d32", "#9e9e9e", "#7986cb"
GROUP_COLOURS = {"raw": RAW, "sampler": SAMPLER, "sfx": SFX, "sf": SF, "sb3": SB3}
STYLE = {
    "svg.fonttype": "none",       # text as text: smaller files, readable and searchable
    "svg.hashsalt": "sfx-docs",   # fixed element ids: the same data gives the same file
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.frameon": False,
}


def load(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


def _thousands(ax, axis: str = "x") -> None:
    fmt = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v / 1000:g}k" if abs(v) >= 1000 else f"{v:g}")
    (ax.xaxis if axis == "x" else ax.yaxis).set_major_formatter(fmt)


def _bars(ax, rows: list[dict]) -> None:
    """Horizontal bars, top to bottom in the rows' order, each labelled with its value."""
    labels = [r["label"] for r in rows][::-1]
    values = [r["fps"] for r in rows][::-1]
    colours = [GROUP_COLOURS[r["group"]] for r in rows][::-1]
    ax.barh(labels, values, color=colours, height=0.6)
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:,}", va="center", fontsize=8)
    ax.set_xlim(0, max(values) * 1.2)
    ax.grid(axis="y", visible=False)
    _thousands(ax)


def throughput_cpu(d: dict):
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    _bars(ax, d["rows"])
    ax.set_xlabel(d["unit"])
    ax.set_title("doom_basic on 2 CPU cores (2026-11-22)", loc="left")
    return fig


def throughput_gpu(d: dict):
    sets = d["sets"]
    fig, axes = plt.subplots(len(sets), 1, figsize=(6.4, 3.6), sharex=True,
                             gridspec_kw={"height_ratios": [len(s["rows"]) for s in sets]})
    for ax, s in zip(axes, sets):
        _bars(ax, s["rows"])
        ax.set_title(f"set {s['set']}", loc="left", fontsize=8)
    top = max(r["fps"] for s in sets for r in s["rows"])
    for ax in axes:
        ax.set_xlim(0, top * 1.2)
    axes[-1].set_xlabel(d["unit"])
    fig.suptitle("doom_basic on one H200, 16 cores (2026-11-28)", x=0.01, ha="left", fontsize=10)
    return fig


def doom_basic_curves(d: dict):
    fig, (left, right) = plt.subplots(1, 2, figsize=(6.4, 2.6), sharey=True)
    names = {"sfx": "sfx", "sf": "Sample Factory 2.1.1"}
    for key, colour in (("sfx", SFX), ("sf", SF)):
        curve = d["runs"][key]["curve"]
        left.plot(curve["frames"], curve["reward"], color=colour, label=names[key])
        right.plot(curve["seconds"], curve["reward"], color=colour, label=names[key])
    for ax in (left, right):
        ax.axhline(d["threshold"], color="black", lw=0.6, ls=":")
    left.set_xlabel("env frames")
    right.set_xlabel("seconds")
    left.set_ylabel("reward (100-episode mean)")
    _thousands(left)
    left.legend(loc="lower right")
    fig.suptitle("doom_basic, one seed each, 2 CPU cores (2026-12-02)", x=0.01, ha="left", fontsize=10)
    return fig


def _seed_dots(ax, groups: list[tuple[str, list[float], str]]) -> None:
    """One row per group: every seed a dot, the mean a bar."""
    for y, (label, values, colour) in enumerate(groups[::-1]):
        ax.scatter(values, [y] * len(values), color=colour, s=18, alpha=0.8, zorder=3)
        mean = sum(values) / len(values)
        ax.plot([mean, mean], [y - 0.3, y + 0.3], color="black", lw=1.5, zorder=4)
        ax.text(mean, y + 0.33, f"mean {mean:,.0f}" if mean >= 1000 else f"mean {mean:.1f}", ha="center",
                fontsize=7)
    ax.set_yticks(range(len(groups)), [g[0] for g in groups[::-1]])
    ax.set_ylim(-0.6, len(groups) - 0.3)
    ax.grid(axis="y", visible=False)


def doom_basic_seeds(d: dict):
    fig, (left, right) = plt.subplots(1, 2, figsize=(6.4, 1.9), sharey=True)
    sfx, sf = d["runs"]["sfx"], d["runs"]["sf"]
    _seed_dots(left, [("sfx", sfx["final"], SFX), ("Sample Factory", sf["final"], SF)])
    _seed_dots(right, [("sfx", sfx["frames_to_40"], SFX), ("Sample Factory", sf["frames_to_40"], SF)])
    left.set_xlabel("final reward at 800k frames")
    right.set_xlabel("frames to an average of 40")
    _thousands(right)
    fig.suptitle("doom_basic, eight seeds a side (2026-11-29)", x=0.01, ha="left", fontsize=10)
    return fig


def halfcheetah_ppo_sb3(d: dict):
    fig, ax = plt.subplots(figsize=(6.4, 1.9))
    colours = [SAMPLER, SFX, SB3]
    _seed_dots(ax, [(g["label"], g["reward"], c) for g, c in zip(d["groups"], colours)])
    ax.set_xlabel("reward at 200,704 env steps (every seed a dot)")
    ax.set_title("HalfCheetah-v5, PPO at the RL Zoo's settings (2026-11-29)", loc="left")
    return fig


def halfcheetah_seed_baseline(d: dict):
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    seen = set()
    for run in d["runs"]:
        colour = SFX if run["label"].startswith("sfx") else SB3
        label = run["label"] if run["label"] not in seen else None
        seen.add(run["label"])
        ax.plot(run["env_steps"], run["reward"], marker="o", ms=3, color=colour, alpha=0.8, label=label)
    ax.set_xlabel("env steps")
    ax.set_ylabel("reward (100-episode mean)")
    _thousands(ax)
    ax.legend(loc="center right")
    ax.set_title("HalfCheetah-v5 to 1M env steps, 3 seeds a side (2026-11-28)", loc="left")
    return fig


def _levels(ax, levels: list[float], runs: dict[str, list], colour: str, label: str) -> None:
    """Env steps at which each reward level was first reached, one step line per seed."""
    for i, (seed, steps) in enumerate(runs.items()):
        points = [(s, lv) for s, lv in zip(steps, levels) if s is not None]
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        ax.plot(xs, ys, marker="o", ms=3, color=colour, alpha=0.8, label=label if i == 0 else None)


def sac_sb3(d: dict):
    fig, (left, right) = plt.subplots(1, 2, figsize=(6.4, 2.6), gridspec_kw={"width_ratios": [1, 2]})
    ip = d["invertedpendulum"]
    _seed_dots(left, [("sfx", ip["sfx"], SFX), ("SB3", ip["sb3"], SB3)])
    left.set_xlabel(f"env steps to {ip['bar']}")
    left.set_title("InvertedPendulum-v5, 6 seeds", loc="left", fontsize=8)
    left.set_xlim(5000, 5700)
    _thousands(left)
    hc = d["halfcheetah"]
    _levels(right, hc["levels"], hc["sfx"], SFX, "sfx SAC")
    _levels(right, hc["levels"], hc["sb3"], SB3, "SB3 SAC (RL Zoo)")
    right.set_xlabel("env steps when the 10-episode average first reached it")
    right.set_ylabel("reward")
    right.set_title("HalfCheetah-v5, 3 seeds", loc="left", fontsize=8)
    _thousands(right)
    right.legend(loc="upper left")
    fig.suptitle("SAC against Stable-Baselines3's SAC (2026-11-27, 2026-11-28)", x=0.01, ha="left", fontsize=10)
    return fig


def r2d2_cartpole(d: dict):
    fig, ax = plt.subplots(figsize=(6.4, 2.4))
    _levels(ax, d["levels"], d["sfx"], SFX, "sfx R2D2")
    _levels(ax, d["levels"], d["sb3"], SB3, "SB3 DQN (RL Zoo); 400 never reached in 150K")
    ax.set_xlabel("env steps when the 100-episode average first reached it")
    ax.set_ylabel("reward")
    ax.set_xlim(0, 150_000)
    _thousands(ax)
    ax.legend(loc="lower right")
    ax.set_title("CartPole-v1, 3 seeds a side (2026-11-26)", loc="left")
    return fig


def replay_cartpole(d: dict):
    fig, ax = plt.subplots(figsize=(6.4, 1.8))
    _seed_dots(ax, [(name, steps, c) for (name, steps), c in zip(d["mixes"].items(), [SFX, SAMPLER, SB3])])
    ax.set_xlabel("env steps to a 100-episode average of 400 (seeds 0, 1, 2)")
    _thousands(ax)
    ax.set_title("CartPole-v1, APPO with replay mixes (2026-11-28)", loc="left")
    return fig


def policy_losses(d: dict):
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    colours = {"ppo": SFX, "awr": SB3, "vmpo": SF, "vpg": RAW}
    for name, loss in d["losses"].items():
        ax.plot(d["env_steps"], loss["mean"], marker="o", ms=3, color=colours[name], label=f"--policy_loss={name}")
        ax.scatter([d["env_steps"][-1]] * len(loss["final"]), loss["final"], color=colours[name], s=8, alpha=0.6)
    ax.set_xlabel("env steps (mean of 3 seeds; dots: each seed at 1M)")
    ax.set_ylabel("reward")
    _thousands(ax)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("HalfCheetah-v5, the policy losses (2026-11-28)", loc="left")
    return fig


FIGURES: dict[str, Callable[[dict], object]] = {
    "throughput_cpu": throughput_cpu,
    "throughput_gpu": throughput_gpu,
    "doom_basic_curves": doom_basic_curves,
    "doom_basic_seeds": doom_basic_seeds,
    "halfcheetah_ppo_sb3": halfcheetah_ppo_sb3,
    "halfcheetah_seed_baseline": halfcheetah_seed_baseline,
    "policy_losses": policy_losses,
    "sac_sb3": sac_sb3,
    "r2d2_cartpole": r2d2_cartpole,
    "replay_cartpole": replay_cartpole,
}


def make(out: Path) -> list[Path]:
    """Draw every figure into ``out`` as ``<name>.svg``; returns the files."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with plt.rc_context(STYLE):
        for name, draw in FIGURES.items():
            fig = draw(load(name))
            fig.tight_layout()
            path = out / f"{name}.svg"
            fig.savefig(path, format="svg", metadata={"Date": None, "Creator": "docs/figures/make_figures.py"})
            plt.close(fig)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder for the SVGs (default: docs/figures)")
    args = parser.parse_args(argv)
    for path in make(args.out):
        print(f"{path.stat().st_size / 1024:6.1f} KB  {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
