"""What Linux says of a process, read from ``/proc``: alive (a zombie is not), its start time, its state letter;
and the pids of multiprocessing's helper processes (the forkserver, the resource tracker). The runtimes
(:mod:`sfx.engine.runtime`) tell a component alive or dead by these, and a component tells its coordinator's."""

from __future__ import annotations

import os
from typing import Any


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a component asks it of its coordinator: its parent is the forkserver,
    so getppid won't do). Without /proc: what ``kill(pid, 0)`` says."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a killed coordinator stays a zombie until its own parent reaps it, and a zombie still answers
    # kill(pid, 0): ask /proc for the state too
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True  # no /proc here: trust kill(pid, 0)


def start_time(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (/proc), None when it is gone (or no /proc).
    With the pid it names one process for good: a pid reused by another process has another start time."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def process_state(pid: int) -> bytes | None:
    """The state letter of process ``pid`` (/proc: ``R``, ``S``, ``T`` for stopped, ``Z`` ...), None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def helper_pid(module: Any, attribute: str) -> int | None:
    """The pid of one of multiprocessing's helper processes of this process (the forkserver, the resource
    tracker), None when it has none. multiprocessing keeps it in a private attribute of its singleton and offers
    no public way to ask; a missing attribute (another Python) means: not watched."""
    singleton = module.__dict__.get(attribute)
    pid = singleton.__dict__.get("_pid" if attribute == "_resource_tracker" else "_forkserver_pid") \
        if singleton is not None else None
    return pid if isinstance(pid, int) else None
