"""cfg.json: a cfg's JSON-able fields, and reading them back (the resume's source); flag values as a
command line (the Python API's way into the parser)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from sfx.errors import ConfigError

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


def flags_to_argv(flags: dict) -> list[str]:
    """``{"num_workers": 2, "use_rnn": False}`` -> ``["--num_workers=2", "--use_rnn=False"]`` (``None``: the
    flag's default, left out; a list or tuple: comma-joined, as the command line writes it)."""
    argv = []
    for key, value in flags.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        argv.append(f"--{key}={value}")
    return argv
