"""Where everything of an experiment lives: ``train_dir/experiment/``.

Pure functions of the cfg (nothing is created here)::

    train_dir/experiment/
        cfg.json                 saved cfg (resume)
        sf_log.txt               the log of every process
        done                     written when training finished normally
        status.json              progress for tools that do not load torch (the runner's --status)
        policy_{NN}_cfg.json     PBT: policy NN's current hyperparameters and reward shaping
        .pbt/                    PBT: snapshots a replaced policy loads (deleted once loaded)
        checkpoint_p{N}/         checkpoints of policy N (+ milestones/)
        .summary/{N}/            TensorBoard event files of policy N
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def experiment_dir(cfg: Any) -> Path:
    """``train_dir/experiment``."""
    return Path(cfg.train_dir).expanduser() / cfg.experiment


def cfg_path(cfg: Any) -> Path:
    return experiment_dir(cfg) / "cfg.json"


def log_path(cfg: Any) -> Path:
    return experiment_dir(cfg) / "sf_log.txt"


def done_path(cfg: Any) -> Path:
    return experiment_dir(cfg) / "done"


def status_path(cfg: Any) -> Path:
    return experiment_dir(cfg) / "status.json"


def policy_cfg_path(cfg: Any, policy_id: int) -> Path:
    return experiment_dir(cfg) / f"policy_{policy_id:02d}_cfg.json"


def pbt_dir(cfg: Any) -> Path:
    return experiment_dir(cfg) / ".pbt"


def summary_dir(cfg: Any, policy_id: int) -> Path:
    return experiment_dir(cfg) / ".summary" / str(policy_id)


def checkpoint_dir(cfg: Any, policy_id: int) -> Path:
    return experiment_dir(cfg) / f"checkpoint_p{policy_id}"


def milestones_dir(cfg: Any, policy_id: int) -> Path:
    return checkpoint_dir(cfg, policy_id) / "milestones"
