"""Helpers shared by the benchmarks that drive trainings as child processes (bench.throughput, bench.learning)."""

from __future__ import annotations

import os
import signal
import subprocess


def split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    """``[own flags] -- [flags for the trainings]`` -> (own, extra)."""
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def stop_group(proc: subprocess.Popen, wait_sec: float = 30.0) -> None:
    """Ctrl+C to a training's main process (sfx and Sample Factory both stop cleanly on it), then SIGKILL
    to whatever is left of its process group: game engines outlive a parent that dies without closing them.
    The child must have been started in its own session (``start_new_session=True``)."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=wait_sec)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
