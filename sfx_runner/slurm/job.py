"""Inside the job: :class:`ExperimentJob`, the callable each array task runs (and submitit pickles)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from sfx_runner.backends.base import format_command
from sfx_runner.run_description import ExperimentSpec
from sfx_runner.state import experiment_finished, log_path, read_state, write_state

CODE_ROOT_VAR = "SFX_RUNNER_CODE_ROOT"  # the folder the job script put in front of PYTHONPATH
LOG_TAIL_LINES = 10


def _current_job_id() -> str | None:
    """This Slurm job's id as squeue / sacct show it (``<array>_<task>`` for an array task)."""
    array_id, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array_id and task:
        return f"{array_id}_{task}"
    return os.environ.get("SLURM_JOB_ID")


def _preemption_signal() -> signal.Signals:
    # submitit's warning signal; a cluster may change it through this variable
    return signal.Signals["SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")]


def tail_lines(path: Path, count: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``count`` lines of a text file ([] when there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            data = f.read()
    except OSError:
        return []
    return data.decode(errors="replace").splitlines()[-count:]


class ExperimentFailed(Exception):
    """The experiment's command exited with an error (the job array task then shows FAILED)."""


class ExperimentJob:
    """The callable each array task runs: one experiment, checkpointed and requeued by submitit.

    Signals. Slurm delivers a job's signals (SIGTERM when it stops the job, the warning signal
    before the time limit) to every process of the job step, the trainer and its workers
    included. So the trainer is started with the warning signal ignored (its default action
    would kill it without a checkpoint); when the warning arrives, submitit calls
    :meth:`checkpoint`, which sends the trainer one SIGINT (as Ctrl+C would), waits for it to
    save its final checkpoint and exit, and returns a copy of this job for submitit to requeue.
    SIGTERM is not sent again to the trainer, which got it from Slurm already (a second signal
    would make it hurry); outside a Slurm step, SIGTERM is forwarded.

    Args:
        spec: the experiment.
        argv: the command to run (``spec.argv`` with its interpreter resolved).
        cwd: the folder it runs in (where the runner was launched).
        stop_timeout_sec: after the warning signal, how long the trainer may take to stop before
            it is killed (the rest of ``--slurm_signal_delay_sec`` goes to requeueing).
        wait_after_sigterm_sec: after a SIGTERM stopped the trainer, how long to wait for a warning
            signal that would requeue the job (a preempting cluster may send both), before this task
            gives up (Slurm kills it anyway after its KillWait).
    """

    def __init__(self, spec: ExperimentSpec, argv: list[str], cwd: str, stop_timeout_sec: float,
                 wait_after_sigterm_sec: float = 30.0) -> None:
        self.spec = spec
        self.argv = list(argv)
        self.cwd = cwd
        self.stop_timeout_sec = stop_timeout_sec
        self.wait_after_sigterm_sec = wait_after_sigterm_sec
        self._init_runtime()

    def _init_runtime(self) -> None:
        # what exists only while the task runs; never pickled (see __getstate__)
        self._proc: subprocess.Popen | None = None
        self._exited = threading.Event()
        self._sigterm_at: float | None = None

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    # -- running

    def __call__(self) -> dict:
        self._init_runtime()
        spec = self.spec
        job_id = _current_job_id()
        log = log_path(spec)
        log.parent.mkdir(parents=True, exist_ok=True)
        if experiment_finished(spec):
            # requeued after the experiment had finished (a warning signal came at its very end)
            write_state(spec, state="finished", backend="slurm", job_id=job_id, returncode=0)
            return {"experiment": spec.name, "returncode": 0, "skipped": True}

        attempt = int((read_state(spec) or {}).get("attempts") or 0) + 1
        write_state(spec, state="running", backend="slurm", job_id=job_id, pid=None, returncode=None,
                    attempts=attempt, host=socket.gethostname(),
                    restarts=int(os.environ.get("SLURM_RESTART_COUNT") or 0))
        # replaces submitit's SIGTERM handler (which only logs it) while the trainer runs
        previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            return self._run_trainer(spec, job_id, attempt, log)
        finally:
            signal.signal(signal.SIGTERM, previous_handler)

    def _run_trainer(self, spec: ExperimentSpec, job_id: str | None, attempt: int, log: Path) -> dict:
        env = _experiment_env(dict(os.environ))
        env.update(spec.env_vars)
        stop_signals = {signal.SIGTERM, _preemption_signal()}
        with open(log, "ab") as out:
            out.write(f"[runner] attempt {attempt}: slurm job {job_id} on {socket.gethostname()} at "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {format_command(spec, self.argv)}\n".encode())
            out.flush()
            # no signal handler may run before self._proc is set and the reaper watches it:
            # hold them back until then (the child unblocks them for itself). preexec_fn is safe
            # here: this process runs no other thread yet (the reaper starts after the fork).
            signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
            try:
                self._proc = subprocess.Popen(self.argv, cwd=self.cwd, env=env, stdin=subprocess.DEVNULL,
                                              stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                              preexec_fn=_child_signals)
                threading.Thread(target=self._reap, name="reaper", daemon=True).start()
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)
        while not self._exited.wait(1.0):
            pass  # short waits: signal handlers run in this thread between them
        rc = self._proc.returncode
        if rc == 0:
            write_state(spec, state="finished", returncode=0)
            return {"experiment": spec.name, "returncode": 0, "attempts": attempt}
        if self._sigterm_at is not None:
            with open(log, "ab") as out:
                out.write(f"[runner] slurm job {job_id}: SIGTERM (cancelled, preempted or at the time limit), "
                          f"trainer stopped (exit code {rc})\n".encode())
            # Slurm stopped the job (scancel, preemption, time limit): the trainer saved a checkpoint.
            # A preempting cluster may follow SIGTERM with the warning signal, whose handler
            # requeues this job and exits; give it a moment, then end without a result so that the
            # job is not reported as finished.
            write_state(spec, state="interrupted", returncode=rc)
            deadline = time.time() + self.wait_after_sigterm_sec
            while time.time() < deadline:
                time.sleep(0.5)
            raise SystemExit(128 + signal.SIGTERM)
        write_state(spec, state="failed", returncode=rc)
        tail = "\n".join(tail_lines(log))
        raise ExperimentFailed(f"experiment {spec.name} exited with code {rc}; last lines of {log}:\n{tail}")

    def _reap(self) -> None:
        assert self._proc is not None
        self._proc.wait()
        self._exited.set()

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self._sigterm_at = time.time()
        if "SLURM_STEP_ID" not in os.environ:
            self._signal_trainer(signal.SIGTERM)

    def _signal_trainer(self, sig: signal.Signals) -> None:
        if self._proc is not None and self._proc.returncode is None:
            try:
                os.killpg(self._proc.pid, sig)  # the trainer leads its own process group
            except ProcessLookupError:
                pass

    # -- checkpoint + requeue (submitit calls this from its signal handler)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Stop the trainer (it saves a final checkpoint) and return this job for submitit to requeue."""
        from submitit.helpers import DelayedSubmission

        rc = self._stop_trainer()
        log = log_path(self.spec)
        with open(log, "ab") as out:
            out.write(f"[runner] slurm job {_current_job_id()}: warning signal, trainer stopped (exit code {rc}); "
                      f"the job is requeued and resumes from the checkpoint\n".encode())
        if not experiment_finished(self.spec):
            write_state(self.spec, state="queued", returncode=rc)
        return DelayedSubmission(ExperimentJob(self.spec, self.argv, self.cwd, self.stop_timeout_sec,
                                               self.wait_after_sigterm_sec))

    def _stop_trainer(self) -> int | None:
        if self._proc is None:
            return None
        if not self._exited.is_set():
            since_sigterm = time.time() - self._sigterm_at if self._sigterm_at is not None else None
            # right after Slurm's SIGTERM the trainer is stopping already: a second signal would rush it
            if since_sigterm is None or since_sigterm > self.stop_timeout_sec:
                self._signal_trainer(signal.SIGINT)
            if not self._exited.wait(self.stop_timeout_sec):
                self._signal_trainer(signal.SIGKILL)
                self._exited.wait(10.0)
        return self._proc.returncode


def _experiment_env(env: dict[str, str]) -> dict[str, str]:
    """The job's environment without what the job script added for this wrapper only (its code
    folder in front of PYTHONPATH), so the experiment sees what the submitting shell had."""
    root = env.pop(CODE_ROOT_VAR, None)
    if root and env.get("PYTHONPATH", "").split(os.pathsep)[0] == root:
        rest = env["PYTHONPATH"][len(root) + 1:]
        if rest:
            env["PYTHONPATH"] = rest
        else:
            del env["PYTHONPATH"]
    return env


def _child_signals() -> None:
    """In the child, before exec: Slurm's warning signal ignored (an ignored signal stays ignored
    across exec, for the trainer's workers too), the signals the parent held back unblocked."""
    sig = _preemption_signal()
    signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, sig})


# submitit pickles the job (ExperimentJob, inside its DelayedSubmission) when it submits it and
# again when it requeues it; the pickle names the class by module path. The path stays
# sfx_runner.backends.slurm.ExperimentJob (re-exported there), what jobs queued before the backend
# was split into sfx_runner.slurm pickled, so pickles written by either version load in the other.
# ExperimentFailed keeps its old path too: it names the failure in the traceback submitit records.
ExperimentJob.__module__ = "sfx_runner.backends.slurm"
ExperimentFailed.__module__ = "sfx_runner.backends.slurm"
