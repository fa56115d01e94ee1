"""Experiment folders under a train dir: discovery, wildcard selection and grouping by seed.

An *experiment folder* is a folder holding ``cfg.json`` or ``.summary/`` (what ``sfx.train``
writes). They may sit directly under the train dir (``train_dir/cartpole``) or deeper, inside run
folders of the runner (``train_dir/quickstart/01_cartpole_see=1_lea=0.001``). An experiment is
named by its path relative to the train dir, with ``/`` separators.

Experiments that differ only by their seed form one *group*, the unit that curves and tables
average over. With ``cfg.json`` the test is the saved cfg: every key equal except the seed and
the per-run bookkeeping keys in :data:`IGNORED_CFG_KEYS`, and the experiments must live in the
same parent folder. Without ``cfg.json`` the folder name decides: a ``seed=N`` or ``see=N`` piece
and the runner's leading index (``01_``) are removed and the rest compared.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sfx_tb.errors import TbError

CFG_FILE = "cfg.json"
SUMMARY_DIR = ".summary"

# cfg keys that may differ between the seeds of one group: the seed itself, where and under which
# name the run was stored, how it was launched, how often it logged or saved, and its provenance (when,
# where, from which commit: shown by the provenance table, never a reason to split a group)
IGNORED_CFG_KEYS = frozenset({
    "seed", "experiment", "train_dir", "command_line", "explicit_args",
    "report_every_sec", "experiment_summaries_interval", "save_every_sec", "keep_checkpoints",
    "save_milestones_sec", "provenance", "restart_behavior",
})

# folder-name pieces: "<NN>_" the runner's index, "seed=N" / "see=N" (the runner cuts keys to >= 3 letters)
_INDEX_RE = re.compile(r"^\d+_(?=.)")
_SEED_PIECE_RE = re.compile(r"^(?:seed|see)=(.*)$")
_GLOB_CHARS = "*?[]"


@dataclass
class ExperimentDir:
    """One experiment folder.

    Attributes:
        name: path relative to the train dir, ``/``-separated (``quickstart/01_cartpole_see=1_lea=0.001``).
        path: the folder itself.
        cfg: the parsed ``cfg.json``, or None when the folder has none (or it cannot be read).
        seed: the seed from ``cfg.json``, else from a ``seed=N`` / ``see=N`` piece of the folder name,
            else None.
        group: label of the group of experiments that differ only by seed (set by :func:`group_by_seed`).
    """

    name: str
    path: Path
    cfg: dict[str, Any] | None = None
    seed: int | None = None
    group: str = ""

    @property
    def summary_dir(self) -> Path:
        """``<folder>/.summary``: one sub-folder of TensorBoard event files per policy."""
        return self.path / SUMMARY_DIR


def is_experiment_dir(path: Path) -> bool:
    """True for a folder that holds ``cfg.json`` or ``.summary/``."""
    return (path / CFG_FILE).is_file() or (path / SUMMARY_DIR).is_dir()


def _read_cfg(path: Path) -> dict[str, Any] | None:
    try:
        cfg = json.loads((path / CFG_FILE).read_text())
    except (OSError, ValueError):
        # a cfg.json being written right now, or none at all: fall back to the folder name
        return None
    return cfg if isinstance(cfg, dict) else None


def _to_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def seed_from_name(folder_name: str) -> int | None:
    """The ``N`` of a ``seed=N`` or ``see=N`` piece of a folder name (pieces are ``_``-separated)."""
    for piece in folder_name.split("_"):
        m = _SEED_PIECE_RE.match(piece)
        if m:
            return _to_int(m.group(1))
    return None


def name_without_seed(name: str) -> str:
    """``name`` with its last component's runner index and ``seed=``/``see=`` piece removed:
    ``quickstart/01_cartpole_see=1_lea=0.001`` -> ``quickstart/cartpole_lea=0.001``."""
    parent, _, leaf = name.rpartition("/")
    leaf = _INDEX_RE.sub("", leaf)
    pieces = [p for p in leaf.split("_") if not _SEED_PIECE_RE.match(p)]
    leaf = "_".join(pieces) or leaf
    return f"{parent}/{leaf}" if parent else leaf


def _make_experiment(root: Path, path: Path) -> ExperimentDir:
    name = path.relative_to(root).as_posix() if path != root else path.resolve().name
    cfg = _read_cfg(path)
    seed = _to_int(cfg.get("seed")) if cfg is not None else None
    if seed is None:
        seed = seed_from_name(path.name)
    return ExperimentDir(name=name, path=path, cfg=cfg, seed=seed)


def find_experiments(root: str | os.PathLike) -> list[ExperimentDir]:
    """Every experiment folder under ``root`` (``root`` itself included), sorted by name.

    The walk does not enter experiment folders nor hidden folders (``.summary``, ``.runner``);
    symlinked folders are followed once.
    """
    root = Path(root)
    if not root.is_dir():
        raise TbError(f"--dir {str(root)!r} is not a folder: point it at the train dir that holds the "
                      f"experiment folders (sfx.train's --train_dir, default ./train_dir)")
    found: list[ExperimentDir] = []
    seen: set[str] = set()

    def walk(folder: Path) -> None:
        real = os.path.realpath(folder)
        if real in seen:
            return
        seen.add(real)
        if is_experiment_dir(folder):
            found.append(_make_experiment(root, folder))
            return
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            return  # unreadable or vanished meanwhile: nothing to show from it
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir():
                    walk(Path(entry.path))
            except OSError:
                continue

    walk(root)
    return sorted(found, key=lambda e: e.name)


def split_patterns(patterns: str | Iterable[str]) -> list[str]:
    """Patterns as a list; each argument may hold several, comma-separated (``'*a*,*b*'``)."""
    if isinstance(patterns, str):
        patterns = [patterns]
    out = [p.strip() for arg in patterns for p in str(arg).split(",") if p.strip()]
    if not out:
        raise TbError("no experiment pattern given: pass at least one, e.g. '*cartpole*' or '*' for all")
    return out


def matches(pattern: str, name: str) -> bool:
    """Whether an experiment named ``name`` is selected by a shell-style ``pattern``.

    The pattern is tried on the whole name, on its last component and on each enclosing run folder
    (``quickstart`` selects every experiment of that run). ``*`` also crosses ``/``.
    """
    parts = name.split("/")
    candidates = [name, parts[-1]] + ["/".join(parts[:i]) for i in range(1, len(parts))]
    return any(fnmatch.fnmatchcase(c, pattern) for c in candidates)


def near_names(pattern: str, names: Sequence[str], n: int = 5) -> list[str]:
    """Up to ``n`` experiment names that look like ``pattern`` (its wildcards ignored), closest first."""
    needle = pattern.strip(_GLOB_CHARS)
    for ch in _GLOB_CHARS:
        needle = needle.replace(ch, "")
    if not needle:
        return list(names[:n])
    # compare with whole names and with their last components, report whole names
    by_key: dict[str, str] = {}
    for name in names:
        by_key.setdefault(name, name)
        by_key.setdefault(name.rsplit("/", 1)[-1], name)
    keys = list(by_key)
    close = difflib.get_close_matches(needle, keys, n=3 * n, cutoff=0.4)
    # a substring hit is "near" too even when the rest of the name makes the ratio small
    close += [k for k in keys if needle.lower() in k.lower() and k not in close]
    picked = list(dict.fromkeys(by_key[k] for k in close))
    return picked[:n]


def no_match_message(pattern: str, root: Path, names: Sequence[str]) -> str:
    """The one-line explanation of a pattern that selects nothing, with near names."""
    if not names:
        return f"pattern {pattern!r} matches nothing: there is no experiment folder under {str(root)!r} yet"
    near = near_names(pattern, names)
    hint = f"; near names: {', '.join(near)}" if near else f"; names look like: {', '.join(names[:3])}"
    return (f"pattern {pattern!r} matches none of the {len(names)} experiment folders under "
            f"{str(root)!r}{hint}")


def select_experiments(patterns: str | Iterable[str], root: str | os.PathLike = "train_dir",
                       on_missing: str = "error") -> tuple[list[ExperimentDir], list[str]]:
    """The experiments under ``root`` that match any of ``patterns``, grouped by seed.

    Args:
        patterns: shell-style patterns (``*``, ``?``, ``[abc]``), see :func:`matches`.
        root: the train dir.
        on_missing: ``"error"``: a pattern that matches nothing raises :class:`TbError` naming near
            names; ``"warn"``: it is reported in the returned messages instead.

    Returns:
        (the matching experiments sorted by name, with ``group`` set; one message per pattern that
        matched nothing).
    """
    if on_missing not in ("error", "warn"):
        raise ValueError(f"on_missing={on_missing!r}: use 'error' or 'warn'")
    pats = split_patterns(patterns)
    root = Path(root)
    everything = find_experiments(root)
    names = [e.name for e in everything]
    chosen: list[ExperimentDir] = []
    missing: list[str] = []
    for pat in pats:
        hits = [e for e in everything if matches(pat, e.name)]
        if not hits:
            missing.append(no_match_message(pat, root, names))
        chosen.extend(hits)
    if missing and on_missing == "error":
        raise TbError(missing[0])
    unique = list({e.name: e for e in chosen}.values())
    group_by_seed(unique)
    return sorted(unique, key=lambda e: e.name), missing


def _cfg_signature(cfg: dict[str, Any]) -> str:
    kept = {k: v for k, v in cfg.items() if k not in IGNORED_CFG_KEYS}
    return json.dumps(kept, sort_keys=True, default=str)


def _differing_keys(cfgs: Sequence[dict[str, Any]]) -> list[str]:
    keys = sorted({k for c in cfgs for k in c} - IGNORED_CFG_KEYS)
    return [k for k in keys if len({json.dumps(c.get(k), default=str) for c in cfgs}) > 1]


def group_by_seed(experiments: Sequence[ExperimentDir]) -> dict[str, list[ExperimentDir]]:
    """Groups of experiments that differ only by seed; sets each experiment's ``group`` label.

    Returns ``{label: [experiments]}`` in order of first appearance. A label is the name of the
    group's first experiment without the runner index and the seed piece
    (``quickstart/01_cartpole_see=1_lea=0.001`` -> ``quickstart/cartpole_lea=0.001``); when groups
    with different cfgs would share a label, the cfg values that tell them apart are appended
    (``ppo [learning_rate=0.001]``).
    """
    keyed: dict[tuple, list[ExperimentDir]] = {}
    for exp in experiments:
        parent = exp.name.rpartition("/")[0]
        if exp.cfg is not None:
            key: tuple = ("cfg", parent, _cfg_signature(exp.cfg))
        else:
            key = ("name", name_without_seed(exp.name))
        keyed.setdefault(key, []).append(exp)

    labels: dict[tuple, str] = {key: name_without_seed(members[0].name) for key, members in keyed.items()}
    by_label: dict[str, list[tuple]] = {}
    for key, label in labels.items():
        by_label.setdefault(label, []).append(key)
    for label, keys in by_label.items():
        if len(keys) < 2:
            continue
        cfg_keys = [k for k in keys if k[0] == "cfg"]
        diff = _differing_keys([keyed[k][0].cfg for k in cfg_keys]) if len(cfg_keys) > 1 else []
        for i, key in enumerate(keys):
            if key[0] == "cfg" and diff:
                cfg = keyed[key][0].cfg
                shown = ", ".join(f"{k}={cfg.get(k)}" for k in diff[:4])
                labels[key] = f"{label} [{shown}]"
            elif i > 0:
                labels[key] = f"{label} ({i + 1})"
    # the disambiguated labels may still collide in odd cases (identical shown values): number them
    seen: dict[str, int] = {}
    for key in keyed:
        base = labels[key]
        seen[base] = seen.get(base, 0) + 1
        if seen[base] > 1:
            labels[key] = f"{base} ({seen[base]})"

    groups: dict[str, list[ExperimentDir]] = {}
    for key, members in keyed.items():
        for exp in members:
            exp.group = labels[key]
        groups[labels[key]] = members
    return groups
