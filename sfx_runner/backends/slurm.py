"""The slurm backend: one Slurm job array per run, submitted through submitit.

Each experiment is one array task. The task runs :class:`ExperimentJob`, which starts the
experiment's command as a child process (its output appended to the experiment's runner log) and
waits for it. Submitit turns Slurm's warning signal (``--signal=USR2@<--slurm_signal_delay_sec>``,
sent before the time limit, or by a cluster that preempts) into a call of
:meth:`ExperimentJob.checkpoint`: it stops the trainer with SIGINT (the trainer saves a final
checkpoint and exits), then the job is requeued, and the requeued job resumes the same experiment
folder. Experiments that finished (their ``done`` file) are never started again.

Before anything is submitted, the partition and the resources asked for are checked against what
``sinfo`` reports, so that a typo fails at once instead of leaving a job pending forever.

Files of a run (besides the experiments' own folders)::

    <train_dir>/<run_name>/.runner/
        <experiment>.json       runner state: queued / running / finished / failed, the Slurm job id
        logs/<experiment>.log   the experiment's stdout + stderr, one header line per attempt
        slurm/<job id>/         submitit's pickles and the job's own stdout/stderr (--slurm_workdir)
        slurm_jobs.txt          every job array submitted for this run
        scancel.sh              cancels all of them

``submitit`` is imported only inside the functions that need it: listing the backends or
``--dry_run`` works without it.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import io
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sfx_runner.backends.base import Backend, format_command, parse_bool
from sfx_runner.errors import RunnerError
from sfx_runner.run_description import ExperimentSpec, RunDescription, resolve_interpreter
from sfx_runner.state import (experiment_finished, log_path, process_runs_experiment, read_state, runner_dir,
                              write_state)

DEFAULT_TIMEOUT_MIN = 3 * 24 * 60  # when the partition has no time limit
CODE_ROOT_VAR = "SFX_RUNNER_CODE_ROOT"  # the folder the job script put in front of PYTHONPATH
LOG_TAIL_LINES = 10
# node states in which a node takes no job until an administrator acts (a powered-down or
# reserved node does come back by itself)
UNUSABLE_NODE_STATES = ("down", "drain", "fail", "inval", "future", "unknown", "not_responding")
# sbatch options the backend sets itself from its flags: a template must not set them too
RESERVED_SBATCH_OPTIONS = {
    "partition": "--slurm_partition", "time": "--slurm_timeout",
    "cpus-per-task": "--slurm_cpus_per_gpu", "cpus-per-gpu": "--slurm_cpus_per_gpu",
    "gpus-per-node": "--slurm_gpus_per_job", "gpus": "--slurm_gpus_per_job", "gpus-per-task": "--slurm_gpus_per_job",
    "signal": "--slurm_signal_delay_sec", "array": "--slurm_max_parallel",
    "output": "--slurm_workdir", "error": "--slurm_workdir", "open-mode": None,
    "job-name": "the run's name",
}


# ----------------------------------------------------------------------------- flag parsing

def parse_timeout_min(value: str | int) -> int:
    """A Slurm time limit in whole minutes (0 = "the partition's limit").

    Accepts what ``sbatch --time`` accepts: ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``,
    ``days-hours``, ``days-hours:minutes``, ``days-hours:minutes:seconds``. Seconds round up.

    Raises:
        RunnerError: anything else.
    """
    text = str(value).strip()
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if not match:
        raise RunnerError(f"--slurm_timeout={value!r} is not a time limit; use minutes (120) or "
                          f"[days-]hours:minutes:seconds (0-02:00:00)")
    days, a, b, c = match.groups()
    if days is not None:  # days-hours[:minutes[:seconds]]
        seconds = int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    elif c is not None:  # hours:minutes:seconds
        seconds = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:  # minutes:seconds
        seconds = int(a) * 60 + int(b)
    else:  # minutes
        seconds = int(a) * 60
    return math.ceil(seconds / 60)


@dataclass
class SbatchTemplate:
    """What a ``--slurm_sbatch_template`` file adds to every job of the run."""

    directives: dict[str, Any] = field(default_factory=dict)  # option -> value (True: a bare flag)
    setup: list[str] = field(default_factory=list)  # shell lines run before the experiment starts


def parse_sbatch_template(path: str | os.PathLike) -> SbatchTemplate:
    """Read a template file. It may contain:

    * ``#SBATCH --option=value`` or ``#SBATCH --option value`` or ``#SBATCH --flag`` lines (long
      option names): extra sbatch directives, e.g. ``#SBATCH --account=rl``, ``#SBATCH --mem=64G``,
      ``#SBATCH --constraint=a100``, ``#SBATCH --qos=high``, ``#SBATCH --exclusive``;
    * other non-empty lines that are not comments: shell commands run in the job before the
      experiment starts, e.g. ``module load cuda/12.1``, ``source ~/venvs/sfx/bin/activate``,
      ``export NCCL_DEBUG=WARN``;
    * comments (``#`` not followed by ``SBATCH``) and blank lines, ignored.

    The options the backend sets from its own flags (partition, time, cpus, gpus, signal, array,
    output, job name) are refused: use the ``--slurm_*`` flags for them.

    Raises:
        RunnerError: a missing file, a short option (``-A``), an option the backend sets itself.
    """
    file = Path(path).expanduser()
    try:
        text = file.read_text()
    except OSError as e:
        raise RunnerError(f"--slurm_sbatch_template={os.fspath(path)!r} cannot be read: {e.strerror}") from None
    template = SbatchTemplate()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = f"{file}:{number}"
        if not line:
            continue
        if re.match(r"#\s*SBATCH\b", line):
            words = shlex.split(re.sub(r"^#\s*SBATCH", "", line), comments=True)
            if not words or not words[0].startswith("--") or len(words) > 2:
                raise RunnerError(f"{where}: {line!r}: write one long option per line, e.g. '#SBATCH --account=rl'")
            option, has_value, value = words[0][2:].partition("=")
            if len(words) == 2:
                if has_value or words[1].startswith("-"):
                    raise RunnerError(f"{where}: {line!r}: write one long option per line, e.g. "
                                      f"'#SBATCH --account=rl'")
                has_value, value = True, words[1]
            if not re.fullmatch(r"[a-z][a-z0-9-]*", option):
                raise RunnerError(f"{where}: {line!r}: {option!r} is not an sbatch option name")
            if option in RESERVED_SBATCH_OPTIONS or (option == "gres" and "gpu" in str(value)):
                instead = RESERVED_SBATCH_OPTIONS.get(option, "--slurm_gpus_per_job")
                raise RunnerError(f"{where}: the template sets --{option}, which the slurm runner sets itself"
                                  + (f" (use {instead})" if instead else ""))
            template.directives[option] = value if has_value else True
        elif line.startswith("#"):
            continue
        else:
            template.setup.append(raw.rstrip())
    return template


# ----------------------------------------------------------------------------- the cluster

@dataclass
class NodeInfo:
    """One node of a partition, as ``sinfo`` reports it."""

    name: str
    cpus: int
    gpus: int
    state: str

    @property
    def usable(self) -> bool:
        state = self.state.lower().rstrip("*~#!%$@^-+")  # suffixes: not responding, powered off, ...
        return not any(state.startswith(s) for s in UNUSABLE_NODE_STATES)


@dataclass
class PartitionInfo:
    """A partition: whether it is the default, whether it takes jobs, its time limit and nodes."""

    name: str
    default: bool
    available: str
    max_time_min: int | None  # None: no limit
    nodes: list[NodeInfo] = field(default_factory=list)


def _run(cmd: list[str], what: str) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise RunnerError(f"{cmd[0]} not found: the slurm runner needs the Slurm client commands (sbatch, "
                          f"sinfo, squeue, sacct) on PATH, i.e. a Slurm login node") from None
    except subprocess.TimeoutExpired:
        raise RunnerError(f"{what}: '{shlex.join(cmd)}' did not answer within 60 s (is slurmctld up?)") from None
    if proc.returncode != 0:
        raise RunnerError(f"{what}: '{shlex.join(cmd)}' failed (exit {proc.returncode}): "
                          f"{(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


def gpus_in_gres(gres: str) -> int:
    """The number of GPUs in a Slurm GRES string: ``gpu:2`` -> 2, ``gpu:a100:4(S:0-1),mps:100`` -> 4,
    ``(null)`` -> 0."""
    return sum(int(n) for n in re.findall(r"(?:^|,)gpu(?::[^:,()]+)?:(\d+)", gres))


def query_partitions() -> dict[str, PartitionInfo]:
    """Every partition of the cluster with its nodes (one ``sinfo`` call)."""
    out = _run(["sinfo", "--noheader", "--Node", "--format=%P|%a|%l|%N|%c|%G|%T"], "asking Slurm for its partitions")
    partitions: dict[str, PartitionInfo] = {}
    for line in out.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 7:
            continue
        name, avail, limit, node, cpus, gres, state = fields
        default = name.endswith("*")
        name = name.rstrip("*")
        part = partitions.get(name)
        if part is None:
            max_time = None if limit.strip().lower() in ("infinite", "unlimited", "n/a") else parse_timeout_min(limit)
            part = partitions[name] = PartitionInfo(name, default, avail, max_time)
        cpu_count = int(re.sub(r"\D.*", "", cpus) or 0)
        part.nodes.append(NodeInfo(node, cpu_count, gpus_in_gres(gres), state))
    if not partitions:
        raise RunnerError("Slurm reports no partition at all (sinfo printed nothing)")
    return partitions


def _describe_nodes(nodes: list[NodeInfo]) -> str:
    kinds: dict[tuple[int, int], int] = {}
    for n in nodes:
        kinds[(n.cpus, n.gpus)] = kinds.get((n.cpus, n.gpus), 0) + 1
    return ", ".join(f"{count} node{'s' if count > 1 else ''} with {cpus} CPUs and {gpus} GPUs"
                     for (cpus, gpus), count in sorted(kinds.items(), reverse=True))


# ----------------------------------------------------------------------------- the job resources

@dataclass
class JobResources:
    """What each array task asks Slurm for."""

    partition: str | None  # None: the cluster's default partition
    cpus: int
    gpus: int
    timeout_min: int  # 0: the partition's limit (resolved by :func:`check_resources`)
    signal_delay_sec: int
    max_parallel: int  # 0: no limit

    def describe(self, array_size: int) -> str:
        timeout = f"{self.timeout_min} min" if self.timeout_min else "the partition's limit"
        parallel = f"%{self.max_parallel}" if self.max_parallel else ""
        return (f"partition={self.partition or '<default>'} cpus-per-task={self.cpus} gpus-per-node={self.gpus} "
                f"time={timeout} signal=USR2@{self.signal_delay_sec}s array=0-{array_size - 1}{parallel}")


def check_resources(res: JobResources, partitions: dict[str, PartitionInfo]) -> tuple[str, int]:
    """The partition to use and the time limit in minutes, or :class:`RunnerError` when Slurm could
    never run the job (so it would wait in the queue forever)."""
    if res.partition is None:
        defaults = [p for p in partitions.values() if p.default]
        if not defaults:
            raise RunnerError(f"the cluster has no default partition: choose one with --slurm_partition "
                              f"(partitions: {', '.join(sorted(partitions))})")
        part = defaults[0]
    elif res.partition not in partitions:
        names = ", ".join(f"{p.name} (default)" if p.default else p.name for p in partitions.values())
        raise RunnerError(f"--slurm_partition={res.partition!r}: no such partition; partitions: {names}")
    else:
        part = partitions[res.partition]
    if part.available.lower() != "up":
        raise RunnerError(f"partition {part.name!r} is {part.available}: it does not start jobs now")
    usable = [n for n in part.nodes if n.usable]
    if not usable:
        raise RunnerError(f"partition {part.name!r} has no usable node (states: "
                          f"{', '.join(sorted({n.state for n in part.nodes}))})")
    what = (f"{res.cpus} CPUs and {res.gpus} GPUs per job (--slurm_gpus_per_job={res.gpus}, "
            f"--slurm_cpus_per_gpu={res.cpus // max(res.gpus, 1)})")
    if not any(n.cpus >= res.cpus and n.gpus >= res.gpus for n in usable):
        raise RunnerError(f"partition {part.name!r} has no node with {what}; it has {_describe_nodes(usable)}")
    timeout = res.timeout_min or part.max_time_min or DEFAULT_TIMEOUT_MIN
    if part.max_time_min is not None and timeout > part.max_time_min:
        raise RunnerError(f"--slurm_timeout={timeout} min is above the time limit of partition {part.name!r} "
                          f"({part.max_time_min} min)")
    if res.signal_delay_sec >= timeout * 60:
        raise RunnerError(f"--slurm_signal_delay_sec={res.signal_delay_sec} is not below the job's time limit "
                          f"({timeout} min): the job would be told to stop as soon as it starts")
    return part.name, timeout


# ----------------------------------------------------------------------------- inside the job

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


# ----------------------------------------------------------------------------- watching the jobs

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


# ----------------------------------------------------------------------------- the backend

class SlurmBackend(Backend):
    """Submits a run as one Slurm job array (through submitit); see the module docstring."""

    name = "slurm"

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("slurm runner (--runner=slurm)")
        g.add_argument("--slurm_gpus_per_job", type=int, default=1,
                       help="GPUs per experiment (one experiment = one array task); 0 for CPU-only jobs")
        g.add_argument("--slurm_cpus_per_gpu", type=int, default=16,
                       help="CPUs per GPU of a job; with --slurm_gpus_per_job=0 the CPUs per job")
        g.add_argument("--slurm_partition", default=None,
                       help="partition to submit to; none = the cluster's default partition")
        g.add_argument("--slurm_timeout", default="0",
                       help="time limit of each job: minutes (120) or [days-]hours:minutes:seconds (0-02:00:00); "
                            "0 = the partition's limit (3 days if it has none). A job that reaches it saves a "
                            "checkpoint and is requeued")
        g.add_argument("--slurm_sbatch_template", default=None,
                       help="file with extra '#SBATCH --option=value' lines and shell setup lines (module load, "
                            "source .../activate) for every job")
        g.add_argument("--slurm_workdir", default=None,
                       help="folder for submitit's files and the jobs' own logs "
                            "(none = <train_dir>/<run_name>/.runner/slurm); must be on a shared file system")
        g.add_argument("--slurm_signal_delay_sec", type=int, default=120,
                       help="the warning signal comes this long before the time limit: the time the trainer has "
                            "to save its checkpoint and the job to requeue itself")
        g.add_argument("--slurm_max_parallel", type=int, default=0,
                       help="at most this many experiments of the run at once (array %%N); 0 = no limit")
        g.add_argument("--slurm_max_timeouts", type=int, default=20,
                       help="requeue an experiment after at most this many time limits (preemptions do not count)")
        g.add_argument("--slurm_wait", type=parse_bool, nargs="?", const=True, default=False,
                       help="after submitting, wait until every job ended and report each experiment's outcome "
                            "(otherwise return once submitted)")
        g.add_argument("--slurm_print_only", type=parse_bool, nargs="?", const=True, default=False,
                       help="Sample Factory 1.x's flag: print the job array that would be submitted (its sbatch "
                            "options, template lines and each task's command), submit nothing: --dry_run")

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        for flag, low in (("slurm_gpus_per_job", 0), ("slurm_cpus_per_gpu", 1), ("slurm_signal_delay_sec", 0),
                          ("slurm_max_parallel", 0), ("slurm_max_timeouts", 0)):
            value = getattr(args, flag)
            if not isinstance(value, int) or value < low:
                raise RunnerError(f"--{flag}={value!r}: must be an integer >= {low}")
        gpus = args.slurm_gpus_per_job
        self.resources = JobResources(
            partition=args.slurm_partition or None,
            cpus=args.slurm_cpus_per_gpu * max(gpus, 1),
            gpus=gpus,
            timeout_min=parse_timeout_min(args.slurm_timeout),
            signal_delay_sec=args.slurm_signal_delay_sec,
            max_parallel=args.slurm_max_parallel,
        )
        self.template = (parse_sbatch_template(args.slurm_sbatch_template) if args.slurm_sbatch_template
                         else SbatchTemplate())
        self.wait = bool(getattr(args, "slurm_wait", False))
        self.poll_sec = 2.0

    def _workdir(self, specs: list[ExperimentSpec]) -> Path:
        if self.args.slurm_workdir:
            return Path(os.path.abspath(os.path.expanduser(self.args.slurm_workdir)))
        return runner_dir(specs[0]) / "slurm"

    # -- dry run

    def dry_run(self, specs: list[ExperimentSpec], run: RunDescription) -> None:
        if not specs:
            print(f"[runner] slurm: nothing to submit for run {run.run_name!r}")
            return
        print(f"[runner] slurm dry run: run {run.run_name!r}, {len(specs)} experiments as one job array "
              f"(nothing submitted)")
        print(f"  sbatch: {self.resources.describe(len(specs))} job-name={run.run_name}")
        for option, value in self.template.directives.items():
            print(f"  sbatch (template): --{option}" + ("" if value is True else f"={value}"))
        for line in self.template.setup:
            print(f"  setup (template): {line}")
        print(f"  submitit folder: {self._workdir(specs)}")
        for i, spec in enumerate(specs):
            print(f"  task {i}: {spec.name}: {format_command(spec, resolve_interpreter(spec.argv))}")

    # -- launch

    def launch(self, specs: list[ExperimentSpec], run: RunDescription) -> int:
        if not specs:
            print(f"[runner] slurm: nothing to submit for run {run.run_name!r}")
            return 0
        partition, timeout_min = check_resources(self.resources, query_partitions())
        queued = queued_job_ids()
        todo = []
        for spec in specs:
            state = read_state(spec) or {}
            if state.get("backend") == "slurm" and state.get("job_id") in queued:
                # a second job would train into the same folder at the same time
                print(f"[runner] {spec.name}: skipped (already queued or running as Slurm job {state['job_id']})")
                continue
            if state.get("backend") == "processes" and process_runs_experiment(state.get("pid"), spec):
                print(f"[runner] {spec.name}: skipped (running here as process {state['pid']})")
                continue
            todo.append(spec)
        if not todo:
            print(f"[runner] slurm: nothing to submit for run {run.run_name!r}")
            return 0

        jobs = self._submit(todo, run, partition, timeout_min)
        array_id = jobs[0].job_id.split("_")[0]
        for spec, job in zip(todo, jobs, strict=True):
            write_state(spec, state="queued", backend="slurm", job_id=job.job_id, pid=None, returncode=None,
                        slurm_folder=str(job.paths.folder))
        scancel = self._write_scancel_script(todo[0], run, array_id, len(todo))
        what = f"job array {array_id}" if len(todo) > 1 else f"job {array_id}"
        print(f"[runner] slurm: submitted {len(todo)} experiment(s) of run {run.run_name!r} as {what} "
              f"on partition {partition} ({timeout_min} min per job)")
        for spec, job in zip(todo, jobs, strict=True):
            print(f"  {job.job_id}: {spec.name}")
        print(f"[runner] cancel them all with: {scancel}")
        if not self.wait:
            return 0
        try:
            return self._wait(todo, jobs)
        except KeyboardInterrupt:
            print(f"\n[runner] stopped waiting; the jobs keep running (cancel them with {scancel})")
            return 130

    def _submit(self, specs: list[ExperimentSpec], run: RunDescription, partition: str, timeout_min: int) -> list:
        try:
            import submitit
        except ImportError:
            raise RunnerError("the slurm runner needs submitit: pip install submitit") from None
        workdir = self._workdir(specs)
        workdir.mkdir(parents=True, exist_ok=True)
        res = self.resources
        try:
            executor = submitit.SlurmExecutor(folder=workdir / "%j", max_num_timeout=self.args.slurm_max_timeouts)
        except RuntimeError as e:  # no srun on PATH
            raise RunnerError(f"the slurm runner cannot submit from here: {e}") from None
        params: dict[str, Any] = dict(
            job_name=run.run_name, partition=partition, time=timeout_min, cpus_per_task=res.cpus,
            signal_delay_s=res.signal_delay_sec, array_parallelism=res.max_parallel or len(specs),
            stderr_to_stdout=True,
        )
        if res.gpus:
            params["gpus_per_node"] = res.gpus
        if self.template.directives:
            params["additional_parameters"] = dict(self.template.directives)
        # the job unpickles ExperimentJob: make it find this very sfx_runner, installed or not
        # (ExperimentJob takes the folder off PYTHONPATH again for the experiment's command)
        code_root = shlex.quote(str(Path(__file__).resolve().parents[2]))
        params["setup"] = [*self.template.setup, f"export {CODE_ROOT_VAR}={code_root}",
                           f"export PYTHONPATH={code_root}${{PYTHONPATH:+:$PYTHONPATH}}"]
        executor.update_parameters(**params)
        # the trainer gets what it needs to save its checkpoint; keep some for requeueing
        stop_timeout = max(5.0, res.signal_delay_sec - min(30.0, res.signal_delay_sec / 4))
        cwd = os.getcwd()
        try:
            # submitit prints sbatch's complaints to stderr and also raises them: keep only the error
            with contextlib.redirect_stderr(io.StringIO()), executor.batch():
                futures = [executor.submit(ExperimentJob(s, resolve_interpreter(s.argv), cwd, stop_timeout))
                           for s in specs]
        except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError, OSError) as e:
            # sbatch's refusal comes back as a submitit error carrying sbatch's stderr
            raise RunnerError(f"sbatch refused the job array of run {run.run_name!r}: {str(e).strip()}") from None
        return futures

    def _write_scancel_script(self, spec: ExperimentSpec, run: RunDescription, array_id: str, count: int) -> Path:
        folder = runner_dir(spec)
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "slurm_jobs.txt", "a") as f:
            f.write(f"{array_id} {time.strftime('%Y-%m-%d %H:%M:%S')} {count} experiments\n")
        ids = [line.split()[0] for line in (folder / "slurm_jobs.txt").read_text().splitlines() if line.strip()]
        script = folder / "scancel.sh"
        tmp = script.with_suffix(".tmp")
        tmp.write_text(
            "#!/usr/bin/env bash\n"
            f"# Cancels every Slurm job of run {run.run_name!r}: the job arrays listed in slurm_jobs.txt\n"
            "# (written by sfx_runner on each submission). Jobs that ended already are ignored by scancel.\n"
            "# Extra arguments go to scancel, e.g. --signal=USR2 to make them checkpoint and requeue.\n"
            f"exec scancel \"$@\" {' '.join(ids)}\n")
        tmp.chmod(0o755)
        os.replace(tmp, script)
        return script

    def _wait(self, specs: list[ExperimentSpec], jobs: list) -> int:
        """Poll Slurm until no task of the array can run any more (squeue no longer lists it: a
        requeued task is listed again at once), then report each experiment's outcome."""
        ids = [job.job_id for job in jobs]
        last_line = ""
        start = time.time()
        while True:
            queued = queued_job_ids()
            counts = {"finished": 0, "running": 0, "failed": 0, "queued": 0}
            for spec, job_id in zip(specs, ids, strict=True):
                if _finished(spec):
                    counts["finished"] += 1
                elif job_id not in queued:
                    counts["failed"] += 1
                elif (read_state(spec) or {}).get("state") == "running":
                    counts["running"] += 1
                else:
                    counts["queued"] += 1
            line = (f"[runner] {counts['finished']}/{len(specs)} finished, {counts['running']} running, "
                    f"{counts['failed']} failed, {counts['queued']} queued")
            if line != last_line:
                print(line, flush=True)
                last_line = line
            if not any(job_id in queued for job_id in ids):
                break
            # every 2 s at first, then less often: a week-long sweep need not poll Slurm constantly
            time.sleep(min(30.0, max(self.poll_sec, (time.time() - start) / 20)))
        time.sleep(1.0)  # sacct lags slurmctld by a second or two
        slurm_states = sacct_states(sorted({i.split("_")[0] for i in ids}))
        failures = 0
        for spec, job_id in zip(specs, ids, strict=True):
            slurm_state, exit_code = slurm_states.get(job_id, ("UNKNOWN", "?"))
            state = read_state(spec) or {}
            if _finished(spec):
                print(f"[runner] {spec.name}: finished (job {job_id}: {slurm_state}, "
                      f"{state.get('attempts', '?')} attempt(s))")
                continue
            failures += 1
            if state.get("state") not in ("failed", "interrupted"):
                # the job died before it could say so itself (killed, node failure, time limit)
                write_state(spec, state="failed")
            print(f"[runner] {spec.name}: FAILED (job {job_id}: Slurm state {slurm_state}, exit code "
                  f"{state.get('returncode') if state.get('returncode') is not None else exit_code}); "
                  f"last lines of {log_path(spec)}:")
            for line in tail_lines(log_path(spec)):
                print(f"    {line}")
        print(f"[runner] slurm: {len(specs) - failures}/{len(specs)} finished, {failures} failed")
        return 1 if failures else 0


def _finished(spec: ExperimentSpec) -> bool:
    """The experiment's command ended well: the trainer's ``done`` file, or (for other programs,
    which write none) exit code 0 recorded by its job."""
    return experiment_finished(spec) or (read_state(spec) or {}).get("state") == "finished"
