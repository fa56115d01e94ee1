"""Which processes a running sweep has, by role, read from what the sweep writes (the runner's state files,
each training's status.json) and the process tree: nothing in sfx's runtime knows about the injector."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import psutil

HELPER_MARKERS = {"forkserver": "forkserver import main", "resource_tracker": "resource_tracker import main"}


class Target(NamedTuple):
    """One process: its role (bench.faults.schedule.ROLES), the experiment it belongs to (None: the runner),
    its name (a component's name, ``coordinator``, ``rank_1``, ``forkserver``, ...) and pid."""

    role: str
    experiment: str | None
    name: str
    pid: int

    def describe(self) -> str:
        return f"{self.experiment}/{self.name}" if self.experiment else self.name


def _read_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _live(pid) -> psutil.Process | None:
    if not isinstance(pid, int):
        return None
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p
    except psutil.Error:
        return None


def experiments(run_dir: Path) -> list[str]:
    """The experiments of a launched run (its runner state files)."""
    return sorted(p.stem for p in (run_dir / ".runner").glob("*.json"))


def role_of(component: str) -> str:
    return component.rsplit("_", 1)[0]


def discover(run_dir: Path, runner_pid: int | None) -> list[Target]:
    """Every live process of the sweep in ``run_dir`` (``<train_dir>/<run name>``), sorted by experiment and
    name; ``runner_pid``: the sweep runner's."""
    out: list[Target] = []
    if _live(runner_pid) is not None:
        out.append(Target("runner", None, "runner", runner_pid))
    for exp in experiments(run_dir):
        status = _read_json(run_dir / exp / "status.json")
        if status.get("status") != "running":
            continue
        coordinator = _live(status.get("pid"))
        if coordinator is None:
            continue
        out.append(Target("coordinator", exp, "coordinator", coordinator.pid))
        for name, pid in sorted((status.get("components") or {}).items()):
            if _live(pid) is not None:
                out.append(Target(role_of(name), exp, name, pid))
        coordinators = [coordinator]
        for rank_dir in sorted((run_dir / exp).glob("rank_*")):
            rank_status = _read_json(rank_dir / "status.json")
            rank = _live(rank_status.get("pid")) if rank_status.get("status") == "running" else None
            if rank is not None:
                out.append(Target("rank", exp, rank_dir.name, rank.pid))
                coordinators.append(rank)
        for c in coordinators:
            try:
                children = c.children()
            except psutil.Error:
                continue
            for child in children:
                try:
                    cmdline = " ".join(child.cmdline())
                except psutil.Error:
                    continue
                for role, marker in HELPER_MARKERS.items():
                    if marker in cmdline:
                        out.append(Target(role, exp, f"{role}_of_{c.pid}", child.pid))
    return sorted(out, key=lambda t: (t.experiment or "", t.name))


def doom_games(targets: list[Target]) -> list[Target]:
    """The ViZDoom game processes under the sweep's rollout workers (each game runs as a process of its own)."""
    out = []
    for t in targets:
        if t.role != "rollout_worker":
            continue
        p = _live(t.pid)
        if p is None:
            continue
        try:
            kids = p.children(recursive=True)
        except psutil.Error:
            continue
        for k in kids:
            try:
                if "vizdoom" in k.name().lower() or "vizdoom" in " ".join(k.cmdline()).lower():
                    out.append(Target("doom_game", t.experiment, f"doom_game_of_{t.name}_{k.pid}", k.pid))
            except psutil.Error:
                continue
    return out


def all_descendants(pid: int) -> list[psutil.Process]:
    p = _live(pid)
    if p is None:
        return []
    try:
        return [p] + p.children(recursive=True)
    except psutil.Error:
        return [p]
