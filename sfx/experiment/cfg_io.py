"""cfg.json: the experiment's cfg, written atomically, read back for resume and evaluation."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable

from sfx.errors import ConfigError
from sfx.experiment.paths import cfg_path, status_path

log = logging.getLogger(__name__)


def _jsonable(value: Any) -> tuple[bool, Any]:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    elif isinstance(value, (set, frozenset)):
        value = sorted(value)
    elif isinstance(value, tuple):
        value = list(value)
    try:
        json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):
        return False, None
    return True, value


def cfg_to_dict(cfg: Any) -> dict:
    """The JSON-able fields of ``cfg`` (a Namespace or a dict); others are skipped with a debug log."""
    items = cfg.items() if isinstance(cfg, dict) else vars(cfg).items()
    out = {}
    for key, value in items:
        ok, value = _jsonable(value)
        if ok:
            out[key] = value
        else:
            log.debug("cfg field %r (%s) is not JSON-serializable: not saved", key, type(value).__name__)
    return out


def atomic_write(path: Path, write: Callable[[IO], None], binary: bool = False) -> None:
    """Call ``write(file)`` on a temp file beside ``path``, then rename it over ``path``: readers
    (and a run killed mid-write) see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`)."""
    atomic_write(path, lambda f: f.write(text))


def save_cfg(cfg: Any, path: str | os.PathLike | None = None) -> Path:
    """Save ``cfg`` as JSON (default: ``train_dir/experiment/cfg.json``), atomically; returns the path."""
    path = Path(path) if path is not None else cfg_path(cfg)
    atomic_write_text(path, json.dumps(cfg_to_dict(cfg), indent=2, sort_keys=True) + "\n")
    return path


def load_cfg(path: str | os.PathLike) -> dict:
    """The dict saved by :func:`save_cfg`. ConfigError naming the file when it is missing or corrupted."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is corrupted (invalid JSON: {e}); fix or delete it") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is corrupted: expected a JSON object, got {type(data).__name__}")
    return data


def write_status(cfg: Any, **fields: Any) -> None:
    """Write ``train_dir/experiment/status.json`` atomically: ``fields`` plus ``updated`` (unix time)
    and ``pid``. Read by tools that must not load torch (``python -m sfx.runner.run --status``)."""
    doc = dict(fields, updated=time.time(), pid=os.getpid())
    atomic_write_text(status_path(cfg), json.dumps(doc, indent=2, sort_keys=True) + "\n")
