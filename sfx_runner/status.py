"""``--status``: one row per experiment, from the runner's state and the trainer's ``status.json``.

States: ``finished`` (the trainer's ``done`` file), ``running``, ``queued``, ``restarting`` (its training died:
the runner starts it again after a backoff), ``failed``,
``interrupted``, ``stopped`` (the runner says running but the process is gone and the experiment
did not finish: a runner or machine that died), ``not started``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from sfx_runner.run_description import ExperimentSpec
from sfx_runner.state import (
    experiment_finished,
    log_path,
    pid_alive,
    process_runs_experiment,
    read_state,
    read_trainer_status,
)

COLUMNS = ("experiment", "state", "env_steps", "reward", "fps", "updated", "folder")

# "rank_lost": a multi-rank training that lost a rank and stopped to be started again (resumable)
_TRAINER_STATES = {"done": "finished", "running": "running", "interrupted": "interrupted", "failed": "failed",
                   "rank_lost": "interrupted"}


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _state_of(spec: ExperimentSpec, runner: dict | None, trainer: dict | None) -> str:
    if experiment_finished(spec):
        return "finished"
    if runner is not None:
        state = str(runner.get("state"))
        local = runner.get("backend") == "processes"  # pids of other backends live on other machines
        if state == "running" and local and not process_runs_experiment(runner.get("pid"), spec):
            return "stopped"
        if state == "queued" and local and not pid_alive(runner.get("runner_pid")):
            return "not started"
        if state == "restarting" and local and not pid_alive(runner.get("runner_pid")):
            return "stopped"  # its runner is gone too: nobody will restart it until the run is launched again
        return state
    if trainer is not None:  # launched by hand, not by the runner
        state = _TRAINER_STATES.get(str(trainer.get("status")), str(trainer.get("status")))
        pid = trainer.get("pid")
        if state == "running" and not pid_alive(pid if isinstance(pid, int) else None):
            return "stopped"
        return state
    return "not started"


def experiment_status(spec: ExperimentSpec) -> dict[str, Any]:
    """One experiment's row: ``experiment``, ``state``, ``env_steps``, ``train_for_env_steps``,
    ``reward`` (list, one per policy), ``fps``, ``updated`` (unix time of the newest information),
    ``folder``, plus ``returncode``, ``backend``, ``job_id``, ``attempts``, ``restarts`` (by the runner after
    the training died, this launch), ``log``."""
    runner = read_state(spec)
    trainer = read_trainer_status(spec)
    rewards = trainer.get("reward") if trainer else None
    if rewards is not None and not isinstance(rewards, list):
        rewards = [rewards]
    times = [t for t in ((runner or {}).get("updated"), (trainer or {}).get("updated")) if _number(t) is not None]
    return {
        "experiment": spec.name,
        "state": _state_of(spec, runner, trainer),
        "env_steps": _number((trainer or {}).get("env_steps")),
        "train_for_env_steps": _number((trainer or {}).get("train_for_env_steps")),
        "reward": [_number(r) for r in rewards] if rewards is not None else None,
        "fps": _number((trainer or {}).get("fps")),
        "updated": max(times) if times else None,
        "folder": str(spec.exp_dir),
        "returncode": (runner or {}).get("returncode"),
        "backend": (runner or {}).get("backend"),
        "job_id": (runner or {}).get("job_id"),
        "attempts": (runner or {}).get("attempts"),
        "restarts": (runner or {}).get("restarts") or 0,
        "log": str(log_path(spec)),
    }


def collect_status(specs: list[ExperimentSpec]) -> list[dict[str, Any]]:
    """:func:`experiment_status` of every experiment, in run order."""
    return [experiment_status(spec) for spec in specs]


def format_age(seconds: float) -> str:
    """``42s ago``, ``5m ago``, ``3h ago``, ``2d ago``."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


def _short_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def _cells(row: dict[str, Any], now: float) -> list[str]:
    state = row["state"]
    if state == "failed" and isinstance(row.get("returncode"), int):
        state = f"failed ({row['returncode']})"
    if row.get("restarts"):
        state += f", {row['restarts']} restart{'s' if row['restarts'] > 1 else ''}"
    steps = "-"
    if row["env_steps"] is not None:
        steps = f"{int(row['env_steps']):,}"
        if row["train_for_env_steps"] is not None:
            steps += f"/{int(row['train_for_env_steps']):,}"
    rewards = row["reward"] or []
    reward = "/".join("-" if r is None else f"{r:.4g}" for r in rewards) or "-"
    fps = f"{row['fps']:,.0f}" if row["fps"] is not None else "-"
    updated = format_age(now - row["updated"]) if row["updated"] is not None else "-"
    return [row["experiment"], state, steps, reward, fps, updated, _short_path(row["folder"])]


def format_status_table(rows: list[dict[str, Any]], now: float | None = None) -> str:
    """The rows as an aligned text table with a closing count per state."""
    now = time.time() if now is None else now
    table = [list(COLUMNS)] + [_cells(row, now) for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in table]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    lines.append(f"{len(rows)} experiment(s): " + ", ".join(f"{n} {state}" for state, n in counts.items()))
    if rows:
        lines.append(f"logs: {_short_path(str(Path(rows[0]['log']).parent))}/")
    return "\n".join(lines)


def print_status(specs: list[ExperimentSpec], as_json: bool = False) -> None:
    """Print the status of ``specs``: the table, or with ``as_json`` a JSON list of rows."""
    rows = collect_status(specs)
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        print(format_status_table(rows))
