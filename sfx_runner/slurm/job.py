"""Inside the job: :class:`ExperimentJob`, the callable each task of an experiment's job runs (and
submitit pickles).

A job of several tasks (``--slurm_nodes`` x ``--slurm_tasks_per_node``) runs one training as that many
ranks: srun starts this callable once per task, and each task's trainer inherits the task's srun
variables (``SLURM_PROCID``, ``SLURM_STEP_ID``, ``SLURM_LOCALID``, ``SLURM_STEP_NUM_TASKS`` ...), so it
is that rank. Who does what:

* Task 0 owns the runner state (``.runner/<experiment>.json``) and the experiment's log
  (``.runner/logs/<experiment>.log``); task k > 0 writes only its own log
  (``.runner/logs/<experiment>.task<k>.log``) and its own record
  (``.runner/tasks/<experiment>/task<k>.json``: its trainer's pid and how it ended, per attempt).
* Warning signal (time limit, preemption): every task stops its own trainer with SIGINT (the ranks
  agree to stop, rank 0 saves the checkpoint); submitit calls :meth:`ExperimentJob.checkpoint` on task 0
  only, which requeues the whole job (all tasks start again and resume). The ranks' vote stops every rank
  "interrupted" (exit code 130) as soon as one task's signal stopped its rank, so a trainer may end before
  its own task's signal arrives: that task then waits for it (task 0 to requeue, task k > 0 for the end).
* A trainer that died outside a stop: exit code :data:`RESUME_EXIT_CODE` (75: another rank died or hung),
  killed by a signal, or any other error exit but 2 and 130 (1: a learner or coordinator that died, a crash):
  task 0 requeues the job with ``scontrol requeue`` after a backoff (``restart_backoff_sec``, doubling per
  requeue, at most :data:`MAX_RESTART_BACKOFF_SEC`; the state says ``restarting`` meanwhile), at most
  ``max_requeues`` times per submission (counted in the state's ``requeues``), then fails the experiment
  with a clear message. This is the processes backend's ``--experiment_restarts`` for Slurm: the trainer
  resumes from its last checkpoint. The backoff is slept inside the job, before the requeue: Slurm lets
  nobody set a requeued job's start time before the job has left the node, which this task cannot outlive.
  Task k > 0 waits for that; if rank 0 never stops (``rank_grace_sec``), it sends the job the
  warning signal, so task 0 stops rank 0 and requeues through submitit.
* Exit code 2 (bad flags, a checkpoint that cannot be read: a requeue would fail the same way) or 130 (a stop
  someone asked for) fails the experiment without a requeue; a task k > 0 that fails that way exits with an
  error, and ``srun --kill-on-bad-exit=1`` ends the other tasks at once.

A job of one task behaves as before: its trainer sees ``SLURM_STEP_NUM_TASKS=1``, a single rank.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from sfx_runner.backends.base import INTERRUPTED_EXIT_CODE, RESUME_EXIT_CODE, describe_returncode, format_command
from sfx_runner.run_description import ExperimentSpec
from sfx_runner.state import (_read_json, atomic_write_json, experiment_finished, log_path, read_state, runner_dir,
                              write_state)

CODE_ROOT_VAR = "SFX_RUNNER_CODE_ROOT"  # the folder the job script put in front of PYTHONPATH
LOG_TAIL_LINES = 10
DEFAULT_MAX_REQUEUES = 3
# the backoff before a requeue for a died trainer: this, doubled per requeue, at most MAX_RESTART_BACKOFF_SEC (the
# processes backend's --restart_backoff_sec)
DEFAULT_RESTART_BACKOFF_SEC = 10.0
MAX_RESTART_BACKOFF_SEC = 600.0
# exit codes a requeue would only repeat: 2 = sfx.train's bad flags or checkpoint; 130 = a stop someone asked for
NOT_REQUEUED_RETURNCODES = (2, INTERRUPTED_EXIT_CODE)
# how long a task whose trainer was lost waits for task 0 to requeue the job (rank 0 notices a lost rank
# within sfx.train's --distributed_timeout_sec, 300 s by default) before it asks for the requeue itself
RANK_GRACE_SEC = 600.0


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


@dataclass(frozen=True)
class TaskPlace:
    """This process's task in its Slurm job step: ``index`` (``SLURM_PROCID``) of ``count``."""

    index: int = 0
    count: int = 1

    @property
    def is_main(self) -> bool:
        return self.index == 0

    def describe(self) -> str:
        """`` task 1 of 8`` for a task of a multi-task job, nothing for a single task."""
        return f" task {self.index} of {self.count}" if self.count > 1 else ""


def current_task(environ: Mapping[str, str] | None = None) -> TaskPlace:
    """The task of this process: ``SLURM_PROCID`` of ``SLURM_STEP_NUM_TASKS`` (or ``SLURM_NTASKS``) inside an
    srun step (``SLURM_STEP_ID`` set); task 0 of 1 anywhere else (a batch script, outside Slurm)."""
    env = os.environ if environ is None else environ
    if "SLURM_STEP_ID" not in env and "SLURM_STEPID" not in env:
        return TaskPlace()
    try:
        index = int(env.get("SLURM_PROCID") or 0)
        count = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or 1)
    except ValueError:
        return TaskPlace()
    return TaskPlace(index, max(count, index + 1))


def task_log_path(spec: ExperimentSpec, index: int) -> Path:
    """The runner log of task ``index``: the experiment's log for task 0, ``<experiment>.task<k>.log`` beside
    it for task k > 0 (each task appends its own trainer's output to its own file)."""
    return log_path(spec) if index == 0 else log_path(spec).with_name(f"{spec.name}.task{index}.log")


def task_record_path(spec: ExperimentSpec, index: int) -> Path:
    return runner_dir(spec) / "tasks" / spec.name / f"task{index}.json"


def read_task_records(spec: ExperimentSpec) -> dict[int, dict]:
    """``{task index: record}`` of a multi-task experiment: each task's last trainer (pid, host) and how it
    ended (``outcome``: running / finished / stopped / resume / failed, ``returncode``), with the
    ``attempt`` (``<job id>:<restart count>``) it belongs to."""
    folder = runner_dir(spec) / "tasks" / spec.name
    records = {}
    for path in sorted(folder.glob("task*.json")) if folder.is_dir() else []:
        doc = _read_json(path)
        if doc is not None and path.stem[4:].isdigit():
            records[int(path.stem[4:])] = doc
    return records


def trainer_outcome(returncode: int, stopped: bool) -> str:
    """How a trainer ended: ``finished`` (0), ``stopped`` (the job or Slurm stopped it), ``failed`` (exit code
    2 or 130: bad input or a stop someone asked for, which a requeue would only repeat), ``resume`` (anything
    else outside a stop: 75 = another rank was lost, killed by a signal, 1 = a learner or coordinator that
    died: start it again, it resumes from its last checkpoint)."""
    if returncode == 0:
        return "finished"
    if stopped:
        return "stopped"
    if returncode in NOT_REQUEUED_RETURNCODES:
        return "failed"
    return "resume"


def restart_backoff(base_sec: float, done: int) -> float:
    """Seconds before requeue number ``done + 1``: ``base_sec`` doubled per requeue done, at most
    :data:`MAX_RESTART_BACKOFF_SEC`."""
    return min(base_sec * 2 ** done, MAX_RESTART_BACKOFF_SEC)


def _append(log: Path, line: str) -> None:
    with open(log, "ab") as out:
        out.write(f"{line}\n".encode())


class ExperimentJob:
    """The callable each task of an experiment's job runs: one experiment (one rank of it in a job of
    several tasks, see the module docstring), checkpointed and requeued by submitit.

    Signals. Slurm delivers a job's signals (SIGTERM when it stops the job, the warning signal
    before the time limit) to every process of the job step, the trainer and its workers
    included. So the trainer is started with the warning signal ignored (its default action
    would kill it without a checkpoint); when the warning arrives, submitit calls
    :meth:`checkpoint` (on task 0), which sends the trainer one SIGINT (as Ctrl+C would), waits for it to
    save its final checkpoint and exit, and returns a copy of this job for submitit to requeue; the
    other tasks stop their own trainers the same way. SIGTERM is not sent again to the trainer, which
    got it from Slurm already (a second signal would make it hurry); outside a Slurm step, SIGTERM is
    forwarded.

    Args:
        spec: the experiment.
        argv: the command to run (``spec.argv`` with its interpreter resolved).
        cwd: the folder it runs in (where the runner was launched).
        stop_timeout_sec: after the warning signal, how long the trainer may take to stop before
            it is killed (the rest of ``--slurm_signal_delay_sec`` goes to requeueing).
        wait_after_sigterm_sec: after a SIGTERM stopped the trainer, how long to wait for a warning
            signal that would requeue the job (a preempting cluster may send both), before this task
            gives up (Slurm kills it anyway after its KillWait).
        max_requeues: how often the job may requeue itself because its training died (a rank lost, a trainer
            killed by a signal or ended by an error but 2 and 130), per submission (``--slurm_max_requeues``).
        rank_grace_sec: how long a task k > 0 whose trainer was lost waits for task 0 to requeue the job
            before it sends the job the warning signal (plus task 0's longest backoff).
        restart_backoff_sec: the wait before the first requeue for a died trainer, doubled for each further
            one (``--slurm_restart_backoff_sec``).
    """

    # the defaults of jobs pickled before these existed
    max_requeues: int = DEFAULT_MAX_REQUEUES
    rank_grace_sec: float = RANK_GRACE_SEC
    restart_backoff_sec: float = DEFAULT_RESTART_BACKOFF_SEC

    def __init__(self, spec: ExperimentSpec, argv: list[str], cwd: str, stop_timeout_sec: float,
                 wait_after_sigterm_sec: float = 30.0, max_requeues: int = DEFAULT_MAX_REQUEUES,
                 rank_grace_sec: float = RANK_GRACE_SEC,
                 restart_backoff_sec: float = DEFAULT_RESTART_BACKOFF_SEC) -> None:
        self.spec = spec
        self.argv = list(argv)
        self.cwd = cwd
        self.stop_timeout_sec = stop_timeout_sec
        self.wait_after_sigterm_sec = wait_after_sigterm_sec
        self.max_requeues = max_requeues
        self.rank_grace_sec = rank_grace_sec
        self.restart_backoff_sec = restart_backoff_sec
        self._init_runtime()

    def _init_runtime(self) -> None:
        # what exists only while the task runs; never pickled (see __getstate__)
        self._proc: subprocess.Popen | None = None
        self._exited = threading.Event()
        self._sigterm_at: float | None = None
        self._warned_at: float | None = None  # the warning signal reached this task (k > 0)
        self._previous_warning_handler: Any = None
        self._task = TaskPlace()

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def _copy(self) -> "ExperimentJob":
        return ExperimentJob(self.spec, self.argv, self.cwd, self.stop_timeout_sec, self.wait_after_sigterm_sec,
                             max_requeues=self.max_requeues, rank_grace_sec=self.rank_grace_sec,
                             restart_backoff_sec=self.restart_backoff_sec)

    # -- running

    def __call__(self) -> dict:
        self._init_runtime()
        spec = self.spec
        task = self._task = current_task()
        job_id = _current_job_id()
        log = task_log_path(spec, task.index)
        log.parent.mkdir(parents=True, exist_ok=True)
        result: dict[str, Any] = {"experiment": spec.name, "returncode": 0}
        if task.count > 1:
            result["task"] = task.index
        if experiment_finished(spec):
            # requeued after the experiment had finished (a warning signal came at its very end)
            if task.is_main:
                write_state(spec, state="finished", backend="slurm", job_id=job_id, returncode=0)
            return {**result, "skipped": True}

        attempt = int((read_state(spec) or {}).get("attempts") or 0) + 1
        if task.is_main:
            write_state(spec, state="running", backend="slurm", job_id=job_id, pid=None, returncode=None,
                        attempts=attempt, host=socket.gethostname(), tasks=task.count, message=None,
                        failed_task=None, restarts=int(os.environ.get("SLURM_RESTART_COUNT") or 0))
        # replaces submitit's SIGTERM handler (which only logs it) while the trainer runs
        previous_handlers = {signal.SIGTERM: signal.signal(signal.SIGTERM, self._on_sigterm)}
        warning = _preemption_signal()
        if not task.is_main:
            # submitit's handler does nothing on a task other than 0: stop this task's rank too
            self._previous_warning_handler = previous_handlers[warning] = signal.signal(warning, self._on_warning)
        else:
            previous_handlers[warning] = signal.getsignal(warning)
        try:
            return self._run_trainer(spec, job_id, attempt, log, result)
        finally:
            for sig, handler in previous_handlers.items():
                if handler is not None:  # None: a handler not set from Python, which cannot be put back
                    signal.signal(sig, handler)

    def _run_trainer(self, spec: ExperimentSpec, job_id: str | None, attempt: int, log: Path,
                     result: dict[str, Any]) -> dict:
        task = self._task
        env = _experiment_env(dict(os.environ))
        env.update(spec.env_vars)
        stop_signals = {signal.SIGTERM, _preemption_signal()}
        with open(log, "ab") as out:
            when = f"on {socket.gethostname()} at {time.strftime('%Y-%m-%d %H:%M:%S')}"
            if task.is_main:
                out.write(f"[runner] attempt {attempt}: slurm job {job_id}{task.describe()} {when}: "
                          f"{format_command(spec, self.argv)}\n".encode())
                if task.count > 1:
                    others = ("the trainer of task 1 writes to " + task_log_path(spec, 1).name if task.count == 2 else
                              f"the trainers of tasks 1-{task.count - 1} write to "
                              + task_log_path(spec, 1).name.replace(".task1.", ".task<k>."))
                    out.write(f"[runner] {task.count} tasks, one rank each; {others}\n".encode())
            else:
                restart = os.environ.get("SLURM_RESTART_COUNT") or "0"
                out.write(f"[runner] slurm job {job_id}{task.describe()} (restart {restart}) {when}: "
                          f"{format_command(spec, self.argv)}\n".encode())
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
        self._record("running")
        while not self._exited.wait(1.0):
            pass  # short waits: signal handlers run in this thread between them
        rc = self._proc.returncode
        stopped = self._sigterm_at is not None or self._warned_at is not None
        # several ranks: a trainer that ends interrupted though this task sent it no signal was stopped by another
        # rank's stop (every rank ends with the most urgent status any rank wanted, sfx.engine.supervision): Slurm's
        # warning signal reached that rank's task first, and reaches this one in a moment
        by_peer = task.count > 1 and rc == INTERRUPTED_EXIT_CODE and not stopped
        outcome = "stopped" if by_peer else trainer_outcome(rc, stopped)
        self._record(outcome, rc)
        if rc == 0:
            if task.is_main:
                write_state(spec, state="finished", returncode=0)
            return result if task.count > 1 else {**result, "attempts": attempt}
        if self._sigterm_at is not None:
            self._after_sigterm(job_id, rc, log)
        if self._warned_at is not None or (by_peer and not task.is_main):
            # a task k > 0: task 0 requeues the job (submitit, checkpoint()), which ends this task
            why = "warning signal" if self._warned_at is not None else "another rank's stop"
            _append(log, f"[runner] slurm job {job_id}{task.describe()}: {why}, trainer stopped (exit code "
                         f"{rc}); task 0 requeues the job")
            self._wait_for_the_end(max(self.rank_grace_sec, self.stop_timeout_sec + 60))
            raise SystemExit(128 + signal.SIGTERM)
        if by_peer:
            self._await_the_warning(job_id, rc, log)
        # from here on this task decides: a warning now must not requeue the job on top of that
        signal.signal(_preemption_signal(), signal.SIG_IGN)
        if task.is_main:
            self._decide_as_main(job_id, rc, outcome, log)
        if outcome == "resume":
            self._wait_for_requeue(job_id, rc, log)
        _append(log, f"[runner] slurm job {job_id}{task.describe()}: the trainer failed ({describe_returncode(rc)}); "
                     f"the other tasks are ended (srun --kill-on-bad-exit) and the job is not requeued")
        raise ExperimentFailed(f"experiment {spec.name}: the trainer of task {task.index} exited with code {rc}; "
                               f"last lines of {log}:\n" + "\n".join(tail_lines(log)))

    def _decide_as_main(self, job_id: str | None, rc: int, outcome: str, log: Path) -> None:
        """Task 0, its trainer ended with an error outside a stop: requeue the job (a lost rank) or fail the
        experiment. Never returns."""
        spec = self.spec
        failed = self._other_tasks("failed")
        lost = self._other_tasks("resume")
        if failed:
            self._fail_for_task(failed[0], rc, log)
        if outcome == "resume" or lost:
            # rank 0's own error after another rank was lost is most likely the loss seen from here
            why = (f"the trainer of task 0 ended ({describe_returncode(rc)})" if outcome == "resume" else
                   f"the trainer of task {lost[0][0]} ended ({describe_returncode(lost[0][1].get('returncode', 0))})")
            self._requeue_or_fail(job_id, rc, why, log)
        write_state(spec, state="failed", returncode=rc, failed_task=0)
        raise ExperimentFailed(f"experiment {spec.name} exited with code {rc}; last lines of {log}:\n"
                               + "\n".join(tail_lines(log)))

    def _await_the_warning(self, job_id: str | None, rc: int, log: Path) -> None:
        """Task 0, its trainer stopped by another rank's stop: Slurm's warning signal reached another task
        first. Wait for it here, where submitit's handler still runs :meth:`checkpoint` (which requeues the
        job and exits); if it does not come (another rank was stopped by hand), the experiment is
        interrupted, and starting the run again resumes it. Never returns."""
        _append(log, f"[runner] slurm job {job_id}: the trainer ended at another rank's stop (exit code {rc}); "
                     f"waiting up to {self.stop_timeout_sec:.0f} s for the warning signal, to requeue the job")
        self._wait_for_the_end(self.stop_timeout_sec)  # the warning's handler runs during the sleeps
        write_state(self.spec, state="interrupted", returncode=rc)
        _append(log, f"[runner] slurm job {job_id}: no warning signal came; the experiment is interrupted "
                     f"(run the same command again to resume it from its checkpoint)")
        raise SystemExit(128 + signal.SIGTERM)

    def _requeue_or_fail(self, job_id: str | None, rc: int, why: str, log: Path) -> None:
        """Requeue this job with ``scontrol requeue`` (every task starts again and resumes from rank 0's
        checkpoint) unless it was requeued ``max_requeues`` times already; then fail. Never returns."""
        spec = self.spec
        done = int((read_state(spec) or {}).get("requeues") or 0)
        if done >= self.max_requeues:
            message = (f"{why}; the job was requeued {done} time(s) for died trainings already "
                       f"(--slurm_max_requeues={self.max_requeues}): not again")
            self._fail(rc, message, log)
        if job_id is None:
            self._fail(rc, f"{why}; not in a Slurm job, nothing to requeue", log)
        backoff = restart_backoff(self.restart_backoff_sec, done)
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0) + 1
        write_state(spec, state="restarting", returncode=rc, requeues=done + 1, restarts=restarts,
                    max_requeues=self.max_requeues,
                    last_restart={"at": time.time(), "returncode": rc, "backoff_sec": backoff, "why": why})
        _append(log, f"[runner] slurm job {job_id}: {why}: requeueing the job (requeue {done + 1} of at most "
                     f"{self.max_requeues}) in {backoff:g} s; every task starts again and resumes from rank 0's "
                     f"checkpoint")
        if self._wait_for_the_end(backoff):
            # cancelled (or preempted) during the backoff: nothing was requeued; the same command resumes it
            write_state(spec, state="interrupted", returncode=rc)
            _append(log, f"[runner] slurm job {job_id}: SIGTERM during the backoff: not requeued (interrupted)")
            raise SystemExit(128 + signal.SIGTERM)
        write_state(spec, state="queued")
        try:
            proc = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=60)
            problem = None if proc.returncode == 0 else (proc.stderr or proc.stdout).strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            problem = str(e)
        if problem is not None:
            self._fail(rc, f"{why}; 'scontrol requeue {job_id}' failed: {problem}", log)
        raise SystemExit(RESUME_EXIT_CODE)  # Slurm ends every task of the job now and queues it again

    def _fail(self, rc: int, message: str, log: Path, task: int = 0) -> None:
        write_state(self.spec, state="failed", returncode=rc, failed_task=task, message=message)
        _append(log, f"[runner] {message}: the experiment failed")
        raise ExperimentFailed(f"experiment {self.spec.name}: {message}")

    def _fail_for_task(self, failed: tuple[int, dict], rc: int, log: Path) -> None:
        index, record = failed
        code = record.get("returncode")
        self._fail(code if isinstance(code, int) else rc,
                   f"the trainer of task {index} failed (exit code {code}; see "
                   f"{task_log_path(self.spec, index)})", log, task=index)

    def _after_sigterm(self, job_id: str | None, rc: int, log: Path) -> None:
        """The trainer stopped on Slurm's SIGTERM: the job is cancelled, preempted, at its time limit, or
        ended by srun because another task failed. Never returns."""
        task = self._task
        _append(log, f"[runner] slurm job {job_id}{task.describe()}: SIGTERM (cancelled, preempted or at the time "
                     f"limit), trainer stopped (exit code {rc})")
        if task.is_main:
            failed = self._other_tasks("failed")
            if failed:  # srun ended this task because another one failed
                self._fail_for_task(failed[0], rc, log)
            # Slurm stopped the job (scancel, preemption, time limit): the trainer saved a checkpoint.
            # A preempting cluster may follow SIGTERM with the warning signal, whose handler
            # requeues this job and exits; give it a moment, then end without a result so that the
            # job is not reported as finished.
            write_state(self.spec, state="interrupted", returncode=rc)
        deadline = time.time() + self.wait_after_sigterm_sec
        while time.time() < deadline:
            time.sleep(0.5)
        raise SystemExit(128 + signal.SIGTERM)

    def _wait_for_requeue(self, job_id: str | None, rc: int, log: Path) -> None:
        """A task k > 0 whose trainer was lost: rank 0 notices and ends with 75, and task 0 requeues the job
        (which ends this task). If that does not happen within ``rank_grace_sec``, send the job the warning
        signal: task 0 then stops rank 0 and requeues through :meth:`checkpoint`. Never returns."""
        task = self._task
        # task 0 sleeps its backoff before it requeues
        grace = self.rank_grace_sec + restart_backoff(self.restart_backoff_sec, max(self.max_requeues - 1, 0))
        _append(log, f"[runner] slurm job {job_id}{task.describe()}: the trainer ended ({describe_returncode(rc)}); "
                     f"waiting up to {grace:.0f} s for task 0 to requeue the job")
        if not self._wait_for_the_end(grace) and job_id is not None:
            sig = _preemption_signal()
            _append(log, f"[runner] slurm job {job_id}{task.describe()}: the job was not requeued within "
                         f"{grace:.0f} s: sending it {sig.name} so that task 0 stops rank 0 and "
                         f"requeues it")
            self._previous_warning_handler = None  # this task has nothing left to stop
            signal.signal(sig, self._on_warning)
            try:
                subprocess.run(["scancel", f"--signal={sig.name[3:]}", job_id], capture_output=True, timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self._wait_for_the_end(self.stop_timeout_sec + 60)
        raise SystemExit(128 + signal.SIGTERM)

    def _wait_for_the_end(self, seconds: float) -> bool:
        """Sleep until Slurm's SIGTERM (the job ends: True) or for ``seconds`` (False)."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self._sigterm_at is not None:
                return True
            time.sleep(0.5)
        return self._sigterm_at is not None

    def _attempt_key(self) -> str:
        return f"{_current_job_id()}:{os.environ.get('SLURM_RESTART_COUNT') or 0}"

    def _record(self, outcome: str, rc: int | None = None) -> None:
        """This task's record (multi-task jobs only): written by this task alone."""
        if self._task.count < 2:
            return
        atomic_write_json(task_record_path(self.spec, self._task.index), {
            "task": self._task.index, "tasks": self._task.count, "attempt": self._attempt_key(),
            "host": socket.gethostname(), "pid": self._proc.pid if self._proc is not None else None,
            "outcome": outcome, "returncode": rc, "updated": time.time()})

    def _other_tasks(self, outcome: str) -> list[tuple[int, dict]]:
        """The other tasks of this attempt whose trainer ended with ``outcome``, by task index."""
        if self._task.count < 2:
            return []
        key = self._attempt_key()
        return [(i, r) for i, r in sorted(read_task_records(self.spec).items())
                if i != self._task.index and r.get("attempt") == key and r.get("outcome") == outcome]

    def _wait_for_other_tasks(self, deadline: float) -> None:
        """Until every other task of this attempt recorded that its trainer ended, or ``deadline``."""
        if self._task.count < 2:
            return
        key = self._attempt_key()
        others = set(range(self._task.count)) - {self._task.index}
        while time.time() < deadline:
            records = read_task_records(self.spec)
            if all(records.get(i, {}).get("attempt") == key and records[i].get("outcome") != "running"
                   for i in others):
                return
            time.sleep(0.2)

    def _reap(self) -> None:
        assert self._proc is not None
        self._proc.wait()
        self._exited.set()

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self._sigterm_at = time.time()
        if "SLURM_STEP_ID" not in os.environ:
            self._signal_trainer(signal.SIGTERM)

    def _on_warning(self, signum: int, frame: Any) -> None:
        """The warning signal on a task k > 0: stop this task's trainer as task 0 stops its own (submitit's
        handler, called too, leaves the checkpoint and the requeue to task 0)."""
        self._warned_at = time.time()
        previous = self._previous_warning_handler
        if callable(previous):
            previous(signum, frame)
        self._stop_trainer()

    def _signal_trainer(self, sig: signal.Signals) -> None:
        if self._proc is not None and self._proc.returncode is None:
            try:
                os.killpg(self._proc.pid, sig)  # the trainer leads its own process group
            except ProcessLookupError:
                pass

    # -- checkpoint + requeue (submitit calls this from its signal handler, on task 0)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Stop the trainer (it saves a final checkpoint) and return this job for submitit to requeue (None:
        no requeue, when the job was requeued for lost ranks ``max_requeues`` times already and this
        warning was sent by a task whose rank was lost)."""
        from submitit.helpers import DelayedSubmission

        started = time.time()
        rc = self._stop_trainer()
        # the other ranks stop at the same agreed iteration: let them end before the requeue kills them
        self._wait_for_other_tasks(started + self.stop_timeout_sec)
        log = task_log_path(self.spec, self._task.index)
        job_id = _current_job_id()
        lost = self._other_tasks("resume")
        if lost and not experiment_finished(self.spec):
            index, record = lost[0]
            why = f"the trainer of task {index} ended ({describe_returncode(record.get('returncode') or 0)})"
            done = int((read_state(self.spec) or {}).get("requeues") or 0)
            if done >= self.max_requeues:
                message = (f"{why}; the job was requeued {done} time(s) for died trainings already "
                           f"(--slurm_max_requeues={self.max_requeues}): not again")
                write_state(self.spec, state="failed", returncode=rc, failed_task=index, message=message)
                _append(log, f"[runner] {message}: the experiment failed")
                return None
            write_state(self.spec, state="queued", returncode=rc, requeues=done + 1)
            _append(log, f"[runner] slurm job {job_id}: warning signal after {why}: trainer stopped (exit code "
                         f"{rc}); requeueing the job (requeue {done + 1} of at most {self.max_requeues})")
            return DelayedSubmission(self._copy())
        _append(log, f"[runner] slurm job {job_id}: warning signal, trainer stopped (exit code {rc}); "
                     f"the job is requeued and resumes from the checkpoint")
        if not experiment_finished(self.spec):
            write_state(self.spec, state="queued", returncode=rc)
        return DelayedSubmission(self._copy())

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
