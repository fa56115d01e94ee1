"""The evaluation results file: what ``python -m sfx.enjoy`` / ``sfx.evaluate()`` played, written as JSON beside
the experiment's checkpoints, ``<train_dir>/<experiment>/eval_results_p<policy>.json`` (the newest evaluation of
that policy; each evaluation replaces it).

Its fields (``format`` names this layout; ``sfx.tb`` reads these files without importing sfx)::

    format           "sfx.eval_results/1"
    experiment       the experiment's name (--experiment), env (--env: the task), policy_index
    checkpoint       the checkpoint file played, checkpoint_kind (latest / best), env_steps and train_step it was saved at
    episodes         how many episodes finished; rewards and lengths: one entry per episode, in order
    mean_reward      mean of rewards (null when no episode finished); std_reward (population std, ddof=0);
    mean_length
    frames           agent steps times --env_frameskip played; deterministic; seed; interrupted (Ctrl+C)
    time             when it finished (unix seconds)
    cfg              the whole cfg the evaluation used (cfg.json's keys and the evaluation flags)
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from sfx.experiment.cfg_io import atomic_write_text, cfg_to_dict
from sfx.experiment.paths import experiment_dir

FORMAT = "sfx.eval_results/1"


def results_path(cfg: Any, policy_id: int) -> Path:
    """``<train_dir>/<experiment>/eval_results_p<policy>.json``."""
    return experiment_dir(cfg) / f"eval_results_p{int(policy_id)}.json"


def _finite_or_none(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def write_results(cfg: Any, policy_id: int, played: dict, checkpoint: dict, checkpoint_file: Path) -> Path:
    """Write the results file of one evaluation (``played``: :func:`sfx.enjoy.enjoy`'s counts) atomically;
    returns its path."""
    rewards = [float(r) for r in played["rewards"]]
    lengths = [int(n) for n in played["lengths"]]
    doc = {
        "format": FORMAT,
        "experiment": cfg.experiment,
        "env": cfg.env,
        "policy_index": int(policy_id),
        "checkpoint": str(Path(checkpoint_file).resolve()),
        "checkpoint_kind": cfg.load_checkpoint_kind,
        "env_steps": int(checkpoint.get("env_steps", 0)),
        "train_step": int(checkpoint.get("train_step", 0)),
        "episodes": len(rewards),
        "rewards": rewards,
        "lengths": lengths,
        "mean_reward": _finite_or_none(played["mean_reward"]),
        "std_reward": _finite_or_none(played["std_reward"]),
        "mean_length": sum(lengths) / len(lengths) if lengths else None,
        "frames": int(played["frames"]),
        "deterministic": bool(cfg.deterministic),
        "seed": cfg.seed,
        "interrupted": bool(played["interrupted"]),
        "time": time.time(),
        "cfg": cfg_to_dict(cfg),
    }
    path = results_path(cfg, policy_id)
    atomic_write_text(path, json.dumps(doc, indent=2, default=str) + "\n")
    return path
