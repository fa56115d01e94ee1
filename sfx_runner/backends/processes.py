"""The processes backend: experiments as child processes of the runner, on this machine.

- At most ``--max_parallel`` experiments at once, ``--pause_between`` seconds between two launches
  (envs and CUDA contexts starting together are slow and memory-hungry).
- GPUs: each experiment gets one GPU through ``CUDA_VISIBLE_DEVICES``, the least busy one (round-robin
  among equally busy ones), with at most ``--experiments_per_gpu`` per GPU at a time.
  ``--num_gpus=-1`` (default) counts them with ``nvidia-smi -L`` (or takes the runner's own
  ``CUDA_VISIBLE_DEVICES``); no GPU: the variable is left alone.
- Each child runs in its own session (so a Ctrl+C in the terminal reaches only the runner, which
  decides what the children get), with stdout and stderr appended to
  ``<train_dir>/<run_name>/.runner/logs/<experiment>.log``.
- A failed experiment is reported (name, exit code, last lines of its log); the others go on. One whose
  training died (a crash, a kill, a lost rank: any exit but 0, 2 = bad flags, 130 = stopped) is started again,
  up to ``--experiment_restarts`` times, after ``--restart_backoff_sec`` doubling per restart: the trainer
  resumes from its last checkpoint. Why here and not inside the training: the runner sees every way a
  training ends, the coordinator's own death (SIGSEGV, the out-of-memory killer, a whole-machine stop)
  included, which no recovery inside that process could cover; the Slurm backend does the same by
  requeueing. Each restart is one line, in the run's state (``restarts``) and in ``--status``.
- An experiment still running from an earlier launch (a runner killed and launched again) is watched by its
  pid, not started twice; when it ends unfinished it is restarted like the others.
- Ctrl+C / SIGTERM: SIGINT to every child's process group (what a terminal Ctrl+C would do to a
  training: it saves a final checkpoint and exits), up to ``--stop_timeout_sec`` to let them finish,
  then SIGKILL. A second Ctrl+C kills at once.
- Relaunching the run skips finished experiments (the CLI does) and experiments still running from
  an earlier launch; the rest start again, and the trainer resumes their folders by itself.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from sfx_runner.backends.base import INTERRUPTED_EXIT_CODE, Backend, describe_returncode, format_command
from sfx_runner.errors import RunnerError
from sfx_runner.run_description import ExperimentSpec, RunDescription, resolve_interpreter
from sfx_runner.state import experiment_finished, log_path, process_runs_experiment, read_state, write_state

POLL_SEC = 0.2
LOG_TAIL_LINES = 10
# what a child stopped by the runner may also return: killed by one of the runner's signals (negative
# in Popen.returncode) or a shell's 128 + signal. Outside a stop, these count as failures (SIGKILL from
# the out-of-memory killer is one).
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
STOPPED_RETURNCODES = {INTERRUPTED_EXIT_CODE} | {-s for s in _STOP_SIGNALS} | {128 + s for s in _STOP_SIGNALS}


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be an integer >= 1")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be an integer >= 0")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a number >= 0")
    return value


def _gpu_count_arg(text: str) -> int:
    value = int(text)
    if value < -1:
        raise argparse.ArgumentTypeError(f"{text} must be -1 (detect), 0 (no GPUs) or a number of GPUs")
    return value


def _visible_devices() -> list[str] | None:
    """The runner's own ``CUDA_VISIBLE_DEVICES`` as a list (None when unset): set by Slurm or by the
    user to restrict the runner to some GPUs, so children must pick among these."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return list(dict.fromkeys(d.strip() for d in value.split(",") if d.strip()))


def nvidia_smi_gpus() -> int | None:
    """The number of GPUs ``nvidia-smi -L`` lists, or None when nvidia-smi is missing or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def gpu_ids(num_gpus: int) -> list[str]:
    """The ``CUDA_VISIBLE_DEVICES`` values to hand out: -1 = every GPU found, 0 = none, N = the first N.

    Raises:
        RunnerError: N is more than the GPUs this machine (or the runner's CUDA_VISIBLE_DEVICES) has.
    """
    if num_gpus == 0:
        return []
    visible = _visible_devices()
    if num_gpus < 0:
        if visible is not None:
            return visible
        return [str(i) for i in range(nvidia_smi_gpus() or 0)]
    if visible is not None:
        if num_gpus > len(visible):
            raise RunnerError(f"--num_gpus={num_gpus}, but CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} "
                              f"makes only {len(visible)} visible")
        return visible[:num_gpus]
    found = nvidia_smi_gpus()
    if found is not None and num_gpus > found:
        raise RunnerError(f"--num_gpus={num_gpus}, but nvidia-smi -L lists {found} GPU(s)")
    return [str(i) for i in range(num_gpus)]


def log_tail(path: Path, offset: int, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of ``path`` written after byte ``offset`` (this attempt's output only)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(offset, size - 64 * 1024)  # enough for 10 lines of any sane log
            f.seek(start)
            data = f.read()
    except OSError:
        return []
    text = data.decode(errors="replace").replace("\r", "\n")
    return [line for line in text.splitlines() if line.strip()][-lines:]


# exit codes that a restart would only repeat: 2 = sfx.train's bad flags or checkpoint (ConfigError); 130 = a
# stop someone asked for (Ctrl+C, SIGTERM), which the runner does not overrule
NOT_RESTARTED_RETURNCODES = (2, INTERRUPTED_EXIT_CODE)
# the backoff doubles per restart up to this
MAX_RESTART_BACKOFF_SEC = 600.0


class _Adopted:
    """An experiment's process started by an earlier runner (which was killed): not our child, so it is
    watched by its pid, with Popen's ``poll`` and ``wait``. Its exit code is unknown: once it ended,
    ``returncode`` is 0 when the trainer wrote its done file, else :data:`UNKNOWN_RETURNCODE`."""

    def __init__(self, pid: int, spec: ExperimentSpec) -> None:
        self.pid = pid
        self.spec = spec
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not process_runs_experiment(self.pid, self.spec):
            self.returncode = 0 if experiment_finished(self.spec) else UNKNOWN_RETURNCODE
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            time.sleep(POLL_SEC)
        return self.returncode


# an adopted experiment that ended without its done file (its exit status went to the runner that started it)
UNKNOWN_RETURNCODE = -1000


def _describe(rc: int) -> str:
    if rc == UNKNOWN_RETURNCODE:
        return "ended unfinished, started by an earlier runner: exit code unknown"
    return describe_returncode(rc)


@dataclass
class _Child:
    spec: ExperimentSpec
    proc: subprocess.Popen | _Adopted
    gpu: str | None
    log: IO[bytes]
    log_offset: int
    started: float
    attempt: int


@dataclass
class _Outcomes:
    finished: list[str] = field(default_factory=list)
    failed: list[tuple[str, int]] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)
    already_running: list[str] = field(default_factory=list)


class _GpuSlots:
    """Hands out GPUs: the least busy one, round-robin among equally busy ones (so consecutive
    experiments spread over the GPUs instead of all landing on the first)."""

    def __init__(self, gpus: list[str], per_gpu: int) -> None:
        self.gpus = gpus
        self.per_gpu = per_gpu
        self.load = {g: 0 for g in gpus}
        self._next = 0

    def acquire(self) -> str | None:
        """A GPU for the next experiment, None without GPUs. Callers keep the number of running
        experiments below ``len(gpus) * per_gpu``, so some GPU always has room."""
        if not self.gpus:
            return None
        n = len(self.gpus)
        i = min(range(n), key=lambda j: (self.load[self.gpus[j]], (j - self._next) % n))
        gpu = self.gpus[i]
        if self.load[gpu] >= self.per_gpu:
            raise RuntimeError(f"no GPU has room: {self.load}")  # the capacity check above prevents it
        self.load[gpu] += 1
        self._next = (i + 1) % n
        return gpu

    def acquire_many(self, n: int) -> str | None:
        """``n`` GPUs (one per rank of a multi-rank experiment) as a CUDA_VISIBLE_DEVICES value."""
        if n == 1 or not self.gpus:
            return self.acquire()
        return ",".join(self.acquire() for _ in range(n))

    def release(self, gpu: str | None) -> None:
        if gpu is not None:
            for g in gpu.split(","):
                self.load[g] -= 1


class _StopSignals:
    """Catches SIGINT and SIGTERM while the runner supervises its children; restores the previous
    handlers on exit. ``count`` says how many arrived (a second one means: kill now)."""

    def __init__(self) -> None:
        self.count = 0
        self.last: str | None = None
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        self.last = signal.Signals(signum).name

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _say(message: str) -> None:
    try:
        print(f"[runner] {message}", flush=True)
    except BrokenPipeError:
        pass  # nobody reads the output any more (a closed pipe): the children still need supervising


class ProcessesBackend(Backend):
    """Experiments as local child processes (see the module docstring)."""

    name = "processes"

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("processes runner (--runner=processes)")
        g.add_argument("--max_parallel", type=_positive_int, default=1, help="experiments running at once")
        g.add_argument("--pause_between", type=_non_negative_float, default=1.0,
                       help="seconds between two launches")
        g.add_argument("--experiments_per_gpu", type=_positive_int, default=1,
                       help="experiments sharing one GPU at a time")
        g.add_argument("--num_gpus", type=_gpu_count_arg, default=-1,
                       help="GPUs to spread the experiments over (CUDA_VISIBLE_DEVICES=<one GPU> per experiment); "
                            "-1 = all that nvidia-smi -L lists (or the runner's CUDA_VISIBLE_DEVICES), "
                            "0 = none: CUDA_VISIBLE_DEVICES is left as it is")
        g.add_argument("--ranks_per_experiment", type=_positive_int, default=1,
                       help="run each experiment as N ranks of one training (torchrun --standalone "
                            "--nproc_per_node=N on this machine; with GPUs, N of them per experiment); the "
                            "experiment's command must be 'python -m <module> ...'")
        g.add_argument("--rank_restarts", type=_non_negative_int, default=3,
                       help="with --ranks_per_experiment > 1: how often torchrun starts every rank again when "
                            "one fails (a rank killed, or exit code 75: another rank was lost); each start "
                            "resumes from rank 0's last checkpoint")
        g.add_argument("--experiment_restarts", type=_non_negative_int, default=3,
                       help="how often an experiment whose training died (a crash, a kill, a lost rank; not exit "
                            "code 2 = bad flags, nor a stop someone asked for) is started again; each start resumes "
                            "from its last checkpoint")
        g.add_argument("--restart_backoff_sec", type=_non_negative_float, default=10.0,
                       help="seconds before an experiment's first restart, doubled for each further one (at most "
                            f"{MAX_RESTART_BACKOFF_SEC:.0f} s)")
        g.add_argument("--stop_timeout_sec", type=_non_negative_float, default=60.0,
                       help="on Ctrl+C / SIGTERM: seconds the experiments get to save a final checkpoint and "
                            "exit before they are killed")

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.max_parallel: int = getattr(args, "max_parallel", 1)
        self.pause_between_sec: float = getattr(args, "pause_between", 1.0)
        self.experiments_per_gpu: int = getattr(args, "experiments_per_gpu", 1)
        self.num_gpus: int = getattr(args, "num_gpus", -1)
        self.stop_timeout_sec: float = getattr(args, "stop_timeout_sec", 60.0)
        self.ranks: int = getattr(args, "ranks_per_experiment", 1)
        self.rank_restarts: int = getattr(args, "rank_restarts", 3)
        self.experiment_restarts: int = getattr(args, "experiment_restarts", 3)
        self.restart_backoff_sec: float = getattr(args, "restart_backoff_sec", 10.0)

    def _capacity(self, gpus: list[str]) -> int:
        if gpus:
            return min(self.max_parallel, len(gpus) * self.experiments_per_gpu // self.ranks)
        return self.max_parallel

    def _argv(self, spec: ExperimentSpec) -> list[str]:
        """The command that runs the experiment: as written, or under torchrun with several ranks."""
        argv = resolve_interpreter(spec.argv)
        return ranks_argv(argv, self.ranks, spec.name, self.rank_restarts) if self.ranks > 1 else argv

    def _plan_line(self, n: int, gpus: list[str]) -> str:
        capacity = self._capacity(gpus)
        gpu_text = (f"GPUs {','.join(gpus)} x {self.experiments_per_gpu} per GPU" if gpus
                    else "no GPU assignment")
        note = ""
        if gpus and capacity < self.max_parallel:
            note = f" (--max_parallel={self.max_parallel} capped by {len(gpus)} GPUs x {self.experiments_per_gpu})"
        return (f"{n} experiment(s) on local processes, at most {capacity} at once{note}, {gpu_text}, "
                f"{self.pause_between_sec:g} s between launches")

    def dry_run(self, specs: list[ExperimentSpec], run: RunDescription) -> None:
        gpus = gpu_ids(self.num_gpus)
        self._check_gpus_for_ranks(gpus)
        _say(f"dry run: {self._plan_line(len(specs), gpus)}")
        if gpus:
            _say("each experiment also gets CUDA_VISIBLE_DEVICES=<its GPU> when it starts")
        for spec in specs:
            print(f"{spec.name}:\n    {format_command(spec, self._argv(spec))}\n"
                  f"    log: {log_path(spec)}", flush=True)

    # --- launch -------------------------------------------------------------------------------

    def _check_gpus_for_ranks(self, gpus: list[str]) -> None:
        if gpus and len(gpus) * self.experiments_per_gpu < self.ranks:
            raise RunnerError(f"--ranks_per_experiment={self.ranks} needs {self.ranks} GPU slots per experiment; "
                              f"there are {len(gpus)} GPU(s) x --experiments_per_gpu={self.experiments_per_gpu}")

    def launch(self, specs: list[ExperimentSpec], run: RunDescription) -> int:
        gpus = gpu_ids(self.num_gpus)
        self._check_gpus_for_ranks(gpus)
        outcomes = _Outcomes()
        queue: deque[ExperimentSpec] = deque()
        adopted: list[_Child] = []
        for spec in specs:
            previous = read_state(spec) or {}
            if previous.get("state") == "running" and previous.get("backend") == self.name \
                    and process_runs_experiment(previous.get("pid"), spec):
                # a runner that died left it running: two trainers on one folder would corrupt it, so it is
                # watched by its pid and restarted should it end unfinished
                _say(f"{spec.name}: still running from an earlier launch (pid {previous['pid']}); not started again, "
                     f"watched")
                outcomes.already_running.append(spec.name)
                adopted.append(_Child(spec, _Adopted(previous["pid"], spec), None, None, 0, time.monotonic(),
                                      int(previous.get("attempts") or 1)))
                write_state(spec, runner_pid=os.getpid())
                continue
            queue.append(spec)
        for spec in queue:
            # the restart budget is this launch's: a person launching again gives each experiment a new one
            write_state(spec, state="queued", backend=self.name, returncode=None, pid=None, job_id=None,
                        runner_pid=os.getpid(), restarts=0)
        total = len(queue)
        _say(self._plan_line(total, gpus))

        running: list[_Child] = list(adopted)
        # experiments waiting for their restart: (when, spec), started before the queue's
        self.restarts_due: list[tuple[float, ExperimentSpec]] = []
        slots = _GpuSlots(gpus, self.experiments_per_gpu)
        last_launch = -float("inf")
        last_progress = ""
        with _StopSignals() as stop:
            try:
                while queue or running or self.restarts_due:
                    changed = self._reap(running, slots, outcomes)
                    if stop.count:
                        break
                    now = time.monotonic()
                    due = next((r for r in self.restarts_due if r[0] <= now), None)
                    if (due or queue) and len(running) < self._capacity(gpus) \
                            and now - last_launch >= self.pause_between_sec:
                        if due is not None:
                            self.restarts_due.remove(due)
                            spec = due[1]
                        else:
                            spec = queue.popleft()
                        gpu = slots.acquire_many(self.ranks)
                        child = self._start(spec, gpu)
                        last_launch, changed = now, True
                        if child is None:
                            slots.release(gpu)
                            outcomes.failed.append((spec.name, 127))
                        else:
                            running.append(child)
                    if changed:
                        progress = self._progress(total, outcomes, len(running), len(queue))
                        if progress != last_progress:
                            _say(progress)
                            last_progress = progress
                    time.sleep(POLL_SEC)
            finally:
                # also on an unexpected error in the loop: never leave children running unsupervised
                if running:
                    self._stop_children(running, slots, outcomes, stop)
            if stop.count:
                for spec in queue:
                    write_state(spec, state="queued", runner_pid=None)  # never started: "not started"
                for _, spec in self.restarts_due:
                    write_state(spec, state="interrupted")  # relaunch the run to resume it
                    outcomes.interrupted.append(spec.name)

        return self._summary(total, outcomes, stopped_by=stop.last if stop.count else None, queued=len(queue))

    def _start(self, spec: ExperimentSpec, gpu: str | None) -> _Child | None:
        """Start one experiment; None when it could not even start (its failure is reported)."""
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")  # the log file shows output as it happens
        shown_env = {}
        if gpu is not None:
            shown_env["CUDA_VISIBLE_DEVICES"] = gpu
        shown_env.update(spec.env_vars)  # the experiment's own values win, CUDA_VISIBLE_DEVICES included
        env.update(shown_env)
        argv = self._argv(spec)
        attempt = int((read_state(spec) or {}).get("attempts") or 0) + 1
        path = log_path(spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        spec.train_dir.mkdir(parents=True, exist_ok=True)
        # unbuffered: a header the disk refused must not stay in a buffer that close() writes (and fails) again, which
        # crashed the runner as it reaped the child (found by the 30-minute fault schedule)
        log = open(path, "ab", buffering=0)  # noqa: SIM115 - closed when the child is reaped
        header = (f"===== [runner] {spec.name}: attempt {attempt}, started {time.strftime('%Y-%m-%d %H:%M:%S')}"
                  f"{f', GPU {gpu}' if gpu is not None else ''} =====\n$ {format_command(spec, argv, shown_env)}\n")
        try:
            log.write(("\n" if log.tell() else "").encode() + header.encode())
            log.flush()
        except OSError as e:  # a full disk: the experiment starts anyway (its own checkpoints say more)
            _say(f"{spec.name}: could not write its log header to {path} ({e.strerror or e})")
        offset = log.tell()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        except OSError as e:
            log.write(f"[runner] could not start {argv[0]!r}: {e}\n".encode())
            log.close()
            write_state(spec, state="failed", backend=self.name, returncode=127, pid=None, attempts=attempt)
            _say(f"FAILED {spec.name}: could not start {argv[0]!r}: {e.strerror or e}")
            return None
        write_state(spec, state="running", backend=self.name, returncode=None, pid=proc.pid, attempts=attempt,
                    started=time.time())
        _say(f"started {spec.name} (pid {proc.pid}{f', GPU {gpu}' if gpu is not None else ''}), log {path}")
        return _Child(spec, proc, gpu, log, offset, time.monotonic(), attempt)

    def _reap(self, running: list[_Child], slots: _GpuSlots, outcomes: _Outcomes, stopping: bool = False) -> bool:
        """Record every child that exited; True if any did. ``stopping``: the runner is stopping its
        children, so being killed by its signals is an interruption, not a failure."""
        changed = False
        for child in list(running):
            rc = child.proc.poll()
            if rc is None:
                continue
            changed = True
            running.remove(child)
            if child.log is not None:
                try:
                    child.log.close()
                except OSError:  # a full disk: the child's output went to the file by itself
                    pass
            slots.release(child.gpu)
            spec, seconds = child.spec, time.monotonic() - child.started
            if rc != 0 and not stopping and self._restart_later(spec, rc, seconds, child):
                continue
            if rc == 0:
                state = "finished"
                outcomes.finished.append(spec.name)
                _say(f"finished {spec.name} after {seconds:.0f} s")
            elif rc == INTERRUPTED_EXIT_CODE or (stopping and rc in STOPPED_RETURNCODES):
                state = "interrupted"
                outcomes.interrupted.append(spec.name)
                _say(f"interrupted {spec.name} ({_describe(rc)}) after {seconds:.0f} s")
            else:
                state = "failed"
                outcomes.failed.append((spec.name, rc))
                tail = log_tail(log_path(spec), child.log_offset)
                lines = "\n".join(f"    | {line}" for line in tail) or "    (no output)"
                _say(f"FAILED {spec.name} ({_describe(rc)}) after {seconds:.0f} s; last lines of "
                     f"{log_path(spec)}:\n{lines}")
            write_state(spec, state=state, returncode=rc, pid=child.proc.pid)
        return changed

    def _restart_later(self, spec: ExperimentSpec, rc: int, seconds: float, child: _Child) -> bool:
        """Schedule the restart of an experiment whose training died, within ``--experiment_restarts``; one line
        and the run's state say so. False when it is not restarted (a user error, a requested stop, the budget
        spent): it then fails as before."""
        if rc in NOT_RESTARTED_RETURNCODES:
            return False
        done = int((read_state(spec) or {}).get("restarts") or 0)
        if done >= self.experiment_restarts:
            _say(f"{spec.name}: not restarted again: its {done} restarts (--experiment_restarts) are spent")
            return False
        backoff = min(self.restart_backoff_sec * 2 ** done, MAX_RESTART_BACKOFF_SEC)
        how = _describe(rc)
        tail = log_tail(log_path(spec), child.log_offset, lines=1) if child.log is not None else []
        _say(f"RESTART {spec.name} ({how}) after {seconds:.0f} s: restart {done + 1} of {self.experiment_restarts} in "
             f"{backoff:g} s, resuming from its last checkpoint" + (f"; its last line: {tail[0]}" if tail else ""))
        write_state(spec, state="restarting", returncode=rc, pid=child.proc.pid, restarts=done + 1,
                    last_restart={"at": time.time(), "returncode": rc, "after_sec": round(seconds, 1)})
        self.restarts_due.append((time.monotonic() + backoff, spec))
        return True

    def _stop_children(self, running: list[_Child], slots: _GpuSlots, outcomes: _Outcomes,
                       stop: _StopSignals) -> None:
        """SIGINT to every child's process group, wait up to the stop timeout, then SIGKILL."""
        hurry_at = 2 if stop.count else 1  # one more signal than the one that stopped the run: kill now
        why = f"{stop.last} received" if stop.count else "runner error"
        _say(f"{why}: stopping {len(running)} experiment(s): SIGINT, then up to {self.stop_timeout_sec:g} s for "
             f"their final checkpoints (Ctrl+C again kills them at once)")
        for child in running:
            _signal_group(child.proc, signal.SIGINT)
        deadline = time.monotonic() + self.stop_timeout_sec
        while running and time.monotonic() < deadline and stop.count < hurry_at:
            self._reap(running, slots, outcomes, stopping=True)
            time.sleep(POLL_SEC)
        if running:
            _say(f"killing {len(running)} experiment(s) that did not stop: {', '.join(c.spec.name for c in running)}")
            for child in running:
                _signal_group(child.proc, signal.SIGKILL)
            for child in running:
                try:
                    child.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:  # uninterruptible (D state): give up on it
                    pass
        self._reap(running, slots, outcomes, stopping=True)

    @staticmethod
    def _progress(total: int, outcomes: _Outcomes, running: int, queued: int) -> str:
        parts = [f"{len(outcomes.finished)}/{total} finished", f"{running} running", f"{len(outcomes.failed)} failed"]
        if outcomes.interrupted:
            parts.append(f"{len(outcomes.interrupted)} interrupted")
        parts.append(f"{queued} queued")
        return ", ".join(parts)

    def _summary(self, total: int, outcomes: _Outcomes, stopped_by: str | None, queued: int) -> int:
        _say(f"done: {self._progress(total, outcomes, 0, queued)}"
             + (f"; stopped by {stopped_by}" if stopped_by else ""))
        for name, rc in outcomes.failed:
            _say(f"  failed: {name} ({_describe(rc)})")
        for name in outcomes.interrupted:
            _say(f"  interrupted: {name} (relaunch the run to resume it)")
        if stopped_by:
            return 130
        if outcomes.failed or outcomes.interrupted:
            return 1
        return 0


def ranks_argv(argv: list[str], ranks: int, name: str, restarts: int = 3) -> list[str]:
    """``python -m <module> args`` as ``python -m torch.distributed.run --standalone --nproc_per_node=N
    --max_restarts=R -m <module> args``: torchrun on this machine, on a free port of its own (several
    multi-rank experiments may run at once), starting every rank again up to R times when one fails (each
    start resumes from rank 0's checkpoint). RunnerError for any other form of command."""
    if len(argv) < 3 or argv[1] != "-m":
        raise RunnerError(f"--ranks_per_experiment={ranks}: the command of {name} must be 'python -m <module> ...' "
                          f"(it is run through torchrun), not {shlex.join(argv)!r}")
    return [argv[0], "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
            f"--max_restarts={restarts}", "-m", *argv[2:]]


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """``sig`` to the child's whole process group (the trainer and its workers), as a terminal would."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


__all__ = ["ProcessesBackend", "gpu_ids", "nvidia_smi_gpus"]
