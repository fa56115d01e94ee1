"""Watching the jobs: what ``squeue`` still lists and what ``sacct`` says about the ended ones."""

from __future__ import annotations

import getpass
import os
import re
import subprocess

from sfx_runner.slurm.cluster import _run


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers): squeue takes a uid too
        return str(os.getuid())


def queued_job_ids() -> set[str]:
    """Ids of this user's jobs that Slurm may still run (pending, running, requeued...), one per array task."""
    out = _run(["squeue", "--noheader", "--array", f"--user={_user()}", "--format=%i"], "listing queued jobs")
    return {line.strip() for line in out.splitlines() if line.strip()}


def _expand_array_id(job_id: str) -> list[str]:
    """``123_[0-2,5%2]`` -> ``123_0 123_1 123_2 123_5``; other ids unchanged."""
    match = re.fullmatch(r"(\d+)_\[([^\]]*)\]", job_id)
    if not match:
        return [job_id]
    ids = []
    for part in match.group(2).split("%")[0].split(","):
        low, _, high = part.partition("-")
        ids += [f"{match.group(1)}_{i}" for i in range(int(low), int(high or low) + 1)]
    return ids


def sacct_states(array_ids: list[str]) -> dict[str, tuple[str, str]]:
    """``{task id: (state, exit code)}`` for the given jobs ({} when accounting is off)."""
    cmd = ["sacct", "--noheader", "--parsable2", "--allocations", "--format=JobID,State,ExitCode"]
    for job in array_ids:
        cmd += ["-j", job]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    states = {}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 3:
            state = parts[1].split()[0] if parts[1].strip() else "UNKNOWN"  # "CANCELLED by 0" -> CANCELLED
            for task in _expand_array_id(parts[0]):
                states[task] = (state, parts[2])
    return states

