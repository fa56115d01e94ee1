"""Measuring one grid point: a fresh child process of its own process group runs the dummy sampler (or a short
training) with the point's flags and writes what it measured; a crash, a refusal or a timeout is a result."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sfx.errors import ConfigError
from sfx.tune_throughput.grid import GridPoint
from sfx.tune_throughput.request import TuneRequest

STOP_GRACE_SEC = 15.0  # after SIGTERM a point stops its workers and exits; then the process group is killed
CHILD_CODE = "import sys; from sfx.tune_throughput.points import child_main; sys.exit(child_main(sys.argv[1:]))"


@dataclass
class PointResult:
    """What one point measured: ``status`` ok | failed | timeout; FPS are env frames per second (sampler:
    over its sampling time, env creation excluded; train: from its first env steps to its end)."""

    point: GridPoint
    mode: str                       # sampler | train
    status: str
    fps: float | None = None
    wall_sec: float = 0.0
    error: str | None = None
    log: str | None = None


def point_argv(request: TuneRequest, point: GridPoint, mode: str, train_dir: Path, name: str) -> list[str]:
    """The child's command line: the passthrough flags, the point, the time limit, a folder of the tuner's own
    (appended last, so they win over the passthrough's --train_dir / --experiment)."""
    if mode == "sampler":
        timing = [f"--timeout_seconds={request.seconds:g}"]
    else:
        # status lines each second: the training's FPS is read off status.json (see _train_point)
        timing = [f"--train_for_seconds={request.train_seconds:g}", "--report_every_sec=1"]
    return [*request.passthrough, *point.flags(), *timing, f"--train_dir={train_dir}", f"--experiment={name}"]


def child_main(args: list[str]) -> int:
    """Inside a point's child process: ``MODE RESULT_JSON ARGV...``; writes ``{'status', 'fps', 'error'}`` (and
    for a training ``session_fps``, the figure startup included)."""
    mode, result_path, argv = args[0], Path(args[1]), args[2:]
    try:
        if mode == "sampler":
            from sfx.dummy_sampler import parse_sampler_args, run_sampler

            result = run_sampler(parse_sampler_args(argv))
            out = {"status": result["status"], "fps": result["fps"], "error": None}
        else:
            out = _train_point(argv)
    except ConfigError as e:
        out = {"status": "failed", "fps": None, "error": str(e)}
    result_path.write_text(json.dumps(out))
    return 0 if out["status"] == "done" else 1


def _train_point(argv: list[str]) -> dict:
    """A short training, its FPS from its first env steps to its end: a few seconds of a short run go to
    starting processes and making envs, more for larger layouts, and the session's FPS would count them.
    The first steps are read off status.json (written every --report_every_sec, 1 s here), the end off its
    last write."""
    import threading

    from sfx.engine import run_training
    from sfx.experiment import status_path
    from sfx.train import parse_for_training

    cfg = parse_for_training(argv)
    path = status_path(cfg)
    first: dict = {}
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2) and not first:
            status = _read_json(path)
            if status and status.get("env_steps", 0) > 0:
                first.update(status)

    watcher = threading.Thread(target=watch, name="tune-status", daemon=True)
    watcher.start()
    try:
        result = run_training(cfg)
    finally:
        done.set()
        watcher.join()
    last = _read_json(path) or {}
    fps = result["fps"]
    if first and last.get("updated", 0) > first["updated"] and last.get("env_steps", 0) > first["env_steps"]:
        fps = (last["env_steps"] - first["env_steps"]) / (last["updated"] - first["updated"])
    return {"status": result["status"], "fps": fps, "session_fps": result["fps"], "error": None}


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _last_line(log_path: Path) -> str | None:
    try:
        lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    return lines[-1][-300:] if lines else None


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the point's main process (sfx stops its workers and exits), then SIGKILL to its process
    group (the workers it started) if anything is left."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STOP_GRACE_SEC)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run_point(request: TuneRequest, point: GridPoint, mode: str, work_dir: Path, name: str) -> PointResult:
    """Measure one point in a fresh child process of its own process group; a crash, a refusal or a point past
    ``--point_timeout_sec`` is a result (status failed / timeout), not an exception."""
    log_path = work_dir / f"{name}.log"
    result_path = work_dir / f"{name}.json"
    argv = point_argv(request, point, mode, work_dir / "train_dir", name)
    start = time.monotonic()
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen([sys.executable, "-c", CHILD_CODE, mode, str(result_path), *argv],
                                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=request.point_timeout_sec)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        except KeyboardInterrupt:
            _stop_group(proc)
            raise
        if timed_out:
            _stop_group(proc)
        else:
            try:  # workers left behind by a crashed coordinator
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    wall = time.monotonic() - start
    if timed_out:
        return PointResult(point, mode, "timeout", wall_sec=wall, log=str(log_path),
                           error=f"killed after {request.point_timeout_sec:.0f} s (--point_timeout_sec)")
    try:
        out = json.loads(result_path.read_text())
    except (OSError, json.JSONDecodeError):
        return PointResult(point, mode, "failed", wall_sec=wall, log=str(log_path),
                           error=f"exit code {proc.returncode}: {_last_line(log_path) or 'no output'}")
    if out["status"] == "done" and out["fps"] == 0:
        limit = f"--train_seconds={request.train_seconds:g}" if mode == "train" else f"--seconds={request.seconds:g}"
        return PointResult(point, mode, "failed", wall_sec=wall, log=str(log_path),
                           error=f"no env steps within {limit} (startup counts in a training's time): give it more")
    if out["status"] != "done" or not out["fps"] or not math.isfinite(out["fps"]):
        return PointResult(point, mode, "failed", wall_sec=wall, log=str(log_path),
                           error=out["error"] or f"{out['status']}: {_last_line(log_path) or 'no output'}")
    return PointResult(point, mode, "ok", fps=float(out["fps"]), wall_sec=wall, log=str(log_path))
