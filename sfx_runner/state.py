"""The run's bookkeeping, shared by every backend and by ``--status``.

Two sources, each written by one side::

    <train_dir>/<run_name>/
        .runner/<experiment>.json        the runner's view (this module): state, backend, pid / job id,
                                         exit code, attempts, log path
        .runner/logs/<experiment>.log    the experiment's stdout + stderr, appended on every attempt
        <experiment>/done                written by the trainer when it finished normally
        <experiment>/status.json         written by the trainer: env steps, reward, fps, ...

Files are replaced atomically (write a temporary file, then ``os.replace``), so a reader never sees
half a file, even while a run is writing.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sfx_runner.run_description import ExperimentSpec

# "restarting": its training died and the runner starts it again after a backoff (--experiment_restarts)
STATES = ("queued", "running", "restarting", "finished", "failed", "interrupted")
BACKEND_NAMES = ("processes", "slurm", "ngc")
RUNNER_DIR_NAME = ".runner"

_DEFAULTS: dict[str, Any] = {"state": "queued", "backend": None, "returncode": None, "pid": None, "job_id": None,
                             "log": None, "attempts": 0, "restarts": 0}


def runner_dir(spec: ExperimentSpec) -> Path:
    """``<train_dir>/<run_name>/.runner``: the runner's files of this experiment's run."""
    return spec.train_dir / RUNNER_DIR_NAME


def state_path(spec: ExperimentSpec) -> Path:
    return runner_dir(spec) / f"{spec.name}.json"


def log_path(spec: ExperimentSpec) -> Path:
    """Where the experiment's stdout and stderr go: ``.runner/logs/<experiment>.log``."""
    return runner_dir(spec) / "logs" / f"{spec.name}.log"


def atomic_write_json(path: Path, doc: Any) -> None:
    """Write ``doc`` as JSON to ``path`` through a temporary file in the same folder and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _read_json(path: Path) -> dict | None:
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        # unreadable or not JSON (written by hand, a full disk): treated as missing rather than
        # stopping a status table or a relaunch over one file
        return None
    return doc if isinstance(doc, dict) else None


def read_state(spec: ExperimentSpec) -> dict | None:
    """The runner state of ``spec`` (see :func:`write_state`), or None when it was never launched."""
    return _read_json(state_path(spec))


def write_state(spec: ExperimentSpec, **fields: Any) -> dict:
    """Update the runner state of ``spec`` with ``fields`` and write it atomically; returns the new state.

    Fields not given keep their previous values (defaults for a new file): ``state`` (one of
    :data:`STATES`), ``backend`` (one of :data:`BACKEND_NAMES`), ``returncode``, ``pid``, ``job_id``,
    ``log`` (path of the experiment's log), ``attempts``, ``restarts`` (how often the runner started it again
    after its training died), ``last_restart``; ``updated`` is set to the current unix time.
    A backend may add fields of its own. A write that fails (a full disk) is one line on stderr, not an
    exception: the runner goes on supervising.
    """
    if "state" in fields and fields["state"] not in STATES:
        raise ValueError(f"state {fields['state']!r} is not one of {STATES}")
    if fields.get("backend") is not None and fields["backend"] not in BACKEND_NAMES:
        raise ValueError(f"backend {fields['backend']!r} is not one of {BACKEND_NAMES}")
    doc = dict(_DEFAULTS, log=str(log_path(spec)))
    doc.update(read_state(spec) or {})
    doc.update(fields)
    doc["updated"] = time.time()
    try:
        atomic_write_json(state_path(spec), doc)
    except OSError as e:
        # a full disk (or a vanished folder) must not end the runner that supervises a sweep: the experiments
        # go on, and the file is written whole at the next change
        print(f"[runner] could not write {state_path(spec)} ({e.strerror or e}): written again at the next change",
              file=sys.stderr, flush=True)
    return doc


def read_trainer_status(spec: ExperimentSpec) -> dict | None:
    """The trainer's ``status.json`` of the experiment (env steps, reward, fps ...), or None."""
    return _read_json(spec.exp_dir / "status.json")


def experiment_finished(spec: ExperimentSpec) -> bool:
    """True when the trainer wrote ``done`` in the experiment folder: every backend skips it on relaunch."""
    return (spec.exp_dir / "done").is_file()


def pid_alive(pid: int | None) -> bool:
    """Whether a process with this id exists on this machine (and is not a zombie, where /proc tells)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    try:
        with open(f"/proc/{pid}/stat") as f:
            # the state letter follows the parenthesised command name, which may itself contain spaces
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def process_runs_experiment(pid: int | None, spec: ExperimentSpec) -> bool:
    """Whether ``pid`` is alive and still this experiment's process: its command line names the
    experiment (guards against a pid reused by an unrelated process since the state was written)."""
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().decode(errors="replace").split("\0")
    except OSError:
        return True  # no /proc (not Linux): trust the pid
    return any(spec.name in arg for arg in cmdline)
