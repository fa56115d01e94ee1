"""cfg.json: the experiment's cfg, written atomically, read back for resume and evaluation."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable

from sfx.cfg.cfg_json import _jsonable, cfg_to_dict, load_cfg  # noqa: F401 - cfg.json lives in sfx.cfg
from sfx.experiment.paths import cfg_path, status_path

log = logging.getLogger(__name__)


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
    """Save ``cfg`` as JSON (default: ``train_dir/experiment/cfg.json``), atomically; returns the path.

    The experiment's own cfg.json (no ``path``) also gets ``provenance``: the git commit and dirty flag of
    sfx's checkout, package versions, CUDA (:func:`sfx.experiment.provenance.provenance`); a resume does not
    read it back as a flag."""
    data = cfg_to_dict(cfg)
    if path is None:
        from sfx.experiment.provenance import provenance

        data["provenance"] = provenance()
    path = Path(path) if path is not None else cfg_path(cfg)
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def write_status(cfg: Any, **fields: Any) -> None:
    """Write ``train_dir/experiment/status.json`` atomically: ``fields`` plus ``updated`` (unix time)
    and ``pid``. Read by tools that must not load torch (``python -m sfx.runner.run --status``)."""
    doc = dict(fields, updated=time.time(), pid=os.getpid())
    atomic_write_text(status_path(cfg), json.dumps(doc, indent=2, sort_keys=True) + "\n")
