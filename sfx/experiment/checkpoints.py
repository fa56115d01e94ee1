"""Checkpoints: atomic saves, pruning to the newest few, milestones, and a load that survives corruption.

A checkpoint is a dict ``{'model', 'optimizer', 'train_step', 'env_steps', 'policy_version', 'cfg', 'rng'}``
(``rng``: the saving process's torch, numpy and Python random states, :func:`sfx.experiment.provenance.rng_state`)
saved by ``torch.save`` as ``checkpoint_p{N}/checkpoint_{train_step:09d}_{env_steps}.pth``.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

from sfx.errors import ConfigError
from sfx.experiment.cfg_io import atomic_write
from sfx.experiment.paths import checkpoint_dir, milestones_dir

log = logging.getLogger(__name__)

CHECKPOINT_RE = re.compile(r"^checkpoint_(\d+)_(\d+)\.pth$")


def checkpoint_name(train_step: int, env_steps: int) -> str:
    return f"checkpoint_{int(train_step):09d}_{int(env_steps)}.pth"


def list_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """Checkpoint files in ``directory``, newest (highest train step) first.

    Only complete checkpoints match the name pattern: temp files of an interrupted save are ignored.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for p in directory.iterdir():
        m = CHECKPOINT_RE.match(p.name)
        if m and p.is_file():
            found.append(((int(m.group(1)), int(m.group(2))), p))
    found.sort(key=lambda item: item[0], reverse=True)
    return [p for _, p in found]


def atomic_torch_save(obj: Any, path: Path) -> None:
    import torch

    atomic_write(path, lambda f: torch.save(obj, f), binary=True)


def save_checkpoint(cfg: Any, policy_id: int, state: dict) -> Path:
    """Save ``state`` (needs ``train_step`` and ``env_steps``) atomically, then keep only the newest
    ``cfg.keep_checkpoints`` checkpoints of this policy. Returns the new file's path."""
    directory = checkpoint_dir(cfg, policy_id)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / checkpoint_name(state["train_step"], state["env_steps"])
    from sfx.experiment.provenance import rng_state

    atomic_torch_save({**state, "rng": state.get("rng") or rng_state()}, path)
    prune_checkpoints(directory, cfg.keep_checkpoints)
    return path


def prune_checkpoints(directory: str | os.PathLike, keep: int) -> list[Path]:
    """Delete all but the ``keep`` newest checkpoints in ``directory``; returns the deleted paths."""
    removed = []
    for old in list_checkpoints(directory)[max(keep, 1):]:
        try:
            old.unlink()
            removed.append(old)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("could not delete old checkpoint %s: %s", old, e)
    return removed


def save_milestone(cfg: Any, policy_id: int, path: str | os.PathLike) -> Path:
    """Copy checkpoint ``path`` into ``checkpoint_p{N}/milestones/`` (never pruned); returns the copy."""
    src = Path(path)
    directory = milestones_dir(cfg, policy_id)
    directory.mkdir(parents=True, exist_ok=True)
    dst = directory / src.name
    with open(src, "rb") as f_src:
        atomic_write(dst, lambda f: shutil.copyfileobj(f_src, f), binary=True)
    return dst


BEST_NAME = "best.pth"


def best_checkpoint_path(cfg: Any, policy_id: int) -> Path:
    """``checkpoint_p{N}/best/best.pth``: the weights that scored best on ``--save_best_metric`` (never pruned)."""
    return checkpoint_dir(cfg, policy_id) / "best" / BEST_NAME


def save_best_checkpoint(cfg: Any, policy_id: int, state: dict) -> Path:
    """Replace the best checkpoint of ``policy_id`` atomically (``state``: ``model`` plus what it scored)."""
    path = best_checkpoint_path(cfg, policy_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_torch_save(state, path)
    return path


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> dict:
    """Load one checkpoint file; raises on an unreadable or malformed one."""
    import torch

    # weights_only=False: these files are written by sfx itself into the user's own experiment folder,
    # and the saved cfg / optimizer state are plain Python containers torch's safe loader may reject.
    state = torch.load(path, map_location=map_location, weights_only=False)
    if not isinstance(state, dict) or "model" not in state:
        raise ValueError(f"not an sfx checkpoint (expected a dict with a 'model' entry, got {type(state).__name__})")
    return state


def load_latest_checkpoint(cfg: Any, policy_id: int, map_location: Any = "cpu") -> dict | None:
    """The newest readable checkpoint of ``policy_id``; ``None`` when there is none.

    An unreadable newest checkpoint (e.g. a disk-full write) is skipped with a warning naming it,
    and the previous one is tried.

    Raises:
        ConfigError: checkpoints exist but none of them can be loaded.
    """
    paths = list_checkpoints(checkpoint_dir(cfg, policy_id))
    errors = []
    for path in paths:
        try:
            state = load_checkpoint(path, map_location=map_location)
        except Exception as e:  # any failure (truncated zip, unpickling error, bad content) means: try older
            reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            log.warning("checkpoint %s cannot be loaded (%s): falling back to the previous one", path, reason)
            errors.append((path, reason))
            continue
        if errors:
            log.warning("policy %d resumes from %s", policy_id, path)
        return state
    if errors:
        path, reason = errors[0]
        raise ConfigError(f"all {len(errors)} checkpoints in {path.parent} are unreadable (newest {path.name}: "
                          f"{reason}); delete them to start over")
    return None


def load_policy_checkpoint(cfg: Any, policy_id: int, what: str = "play") -> tuple[dict, Path]:
    """The checkpoint ``cfg.load_checkpoint_kind`` names (``latest``: the newest readable one; ``best``: the
    one ``--save_best_metric`` kept) and its file, for entry points that use a trained policy (``what`` it
    is for, in the error message).

    Raises:
        ConfigError: there is no such checkpoint (the message says where it looked and what to do).
    """
    if cfg.load_checkpoint_kind == "best":
        best = best_checkpoint_path(cfg, policy_id)
        if not best.is_file():
            raise ConfigError(f"no best checkpoint {best}: train with --save_best_metric=eval/reward and "
                              f"--eval_every_env_steps, or {what} the latest one (--load_checkpoint_kind=latest)")
        return load_checkpoint(best), best
    checkpoint = load_latest_checkpoint(cfg, policy_id)
    if checkpoint is None:
        raise ConfigError(f"no checkpoint in {checkpoint_dir(cfg, policy_id)}: train the experiment first "
                          f"(python -m sfx.train --env={cfg.env} --experiment={cfg.experiment}) "
                          f"or check --train_dir/--experiment/--policy_index")
    return checkpoint, checkpoint_dir(cfg, policy_id) / checkpoint_name(checkpoint["train_step"],
                                                                        checkpoint["env_steps"])
