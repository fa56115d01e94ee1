"""The slurm backend: one Slurm job array per run, submitted through submitit.

Each experiment is one array task. The task runs :class:`ExperimentJob`, which starts the
experiment's command as a child process (its output appended to the experiment's runner log) and
waits for it. Submitit turns Slurm's warning signal (``--signal=USR2@<--slurm_signal_delay_sec>``,
sent before the time limit, or by a cluster that preempts) into a call of
:meth:`ExperimentJob.checkpoint`: it stops the trainer with SIGINT (the trainer saves a final
checkpoint and exits), then the job is requeued, and the requeued job resumes the same experiment
folder. Experiments that finished (their ``done`` file) are never started again.

Several ranks (``--slurm_nodes=N --slurm_tasks_per_node=T``): each experiment's array task is one job
of N x T tasks (srun starts :class:`ExperimentJob` once per task, with ``--kill-on-bad-exit=1``). Each
task's trainer inherits its task's srun variables (``SLURM_PROCID``, ``SLURM_STEP_ID``,
``SLURM_LOCALID`` ...) and so becomes that rank of one training; with GPUs every task is one rank on
one GPU (``--gpus-per-node=T``, ``--cpus-per-task=--slurm_cpus_per_gpu``). Task 0 owns the runner
state and the experiment's log; task k writes ``logs/<experiment>.task<k>.log``. On the warning signal
every task stops its own rank and task 0 requeues the job. A trainer that exits with 75 (another rank
died or hung) or is killed by a signal makes task 0 requeue the job (at most ``--slurm_max_requeues``
times per submission): every task starts again and resumes from rank 0's checkpoint. Any other error
fails the experiment. See :mod:`sfx_runner.slurm.job`.

Before anything is submitted, the partition and the resources asked for are checked against what
``sinfo`` reports, so that a typo fails at once instead of leaving a job pending forever.

Files of a run (besides the experiments' own folders)::

    <train_dir>/<run_name>/.runner/
        <experiment>.json       runner state: queued / running / finished / failed, the Slurm job id
        logs/<experiment>.log   the experiment's stdout + stderr, one header line per attempt (task 0)
        logs/<experiment>.task<k>.log   the same for task k > 0 of a multi-task job
        tasks/<experiment>/task<k>.json  each task's last trainer outcome (multi-task jobs)
        slurm/<job id>/         submitit's pickles and the job's own stdout/stderr (--slurm_workdir)
        slurm_jobs.txt          every job array submitted for this run
        scancel.sh              cancels all of them

``submitit`` is imported only inside the functions that need it: listing the backends or
``--dry_run`` works without it.

The code is split by section: this module is the backend itself (:class:`SlurmBackend`); the
other sections are in :mod:`sfx_runner.slurm` (flags, cluster, resources, job, watch), and every
name is re-exported here as it was when this was one module. :class:`ExperimentJob` keeps this
module's path in its pickles, so a job queued or requeued by an older version still loads.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from sfx_runner.backends.base import Backend, describe_returncode, format_command, parse_bool
from sfx_runner.errors import RunnerError
from sfx_runner.run_description import ExperimentSpec, RunDescription, resolve_interpreter
# every name of the sections, re-exported (this was one module; submitit pickles ExperimentJob by this path)
from sfx_runner.slurm.cluster import (UNUSABLE_NODE_STATES, NodeInfo, PartitionInfo, _describe_nodes, _run,
                                      gpus_in_gres, query_partitions)
from sfx_runner.slurm.flags import RESERVED_SBATCH_OPTIONS, SbatchTemplate, parse_sbatch_template, parse_timeout_min
from sfx_runner.slurm.job import (CODE_ROOT_VAR, DEFAULT_MAX_REQUEUES, DEFAULT_RESTART_BACKOFF_SEC, LOG_TAIL_LINES,
                                  MAX_RESTART_BACKOFF_SEC, RESUME_EXIT_CODE,
                                  ExperimentFailed, ExperimentJob, TaskPlace, _child_signals, _current_job_id,
                                  _experiment_env, _preemption_signal, current_task, read_task_records,
                                  tail_lines, task_log_path)
from sfx_runner.slurm.resources import DEFAULT_TIMEOUT_MIN, JobResources, check_resources
from sfx_runner.slurm.watch import _expand_array_id, _user, queued_job_ids, sacct_states
from sfx_runner.state import experiment_finished, log_path, process_runs_experiment, read_state, runner_dir, write_state

# ----------------------------------------------------------------------------- the backend

class SlurmBackend(Backend):
    """Submits a run as one Slurm job array (through submitit); see the module docstring."""

    name = "slurm"

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("slurm runner (--runner=slurm)")
        g.add_argument("--slurm_gpus_per_job", type=int, default=1,
                       help="GPUs per experiment (one experiment = one array task); 0 for CPU-only jobs. With "
                            "several tasks (--slurm_nodes / --slurm_tasks_per_node) each task is one rank on one "
                            "GPU: 1 (or the job's total, nodes x tasks per node) asks for one GPU per task, 0 for "
                            "none")
        g.add_argument("--slurm_cpus_per_gpu", type=int, default=16,
                       help="CPUs per GPU of a job; with --slurm_gpus_per_job=0 the CPUs per job; with several "
                            "tasks the CPUs per task (= per rank)")
        g.add_argument("--slurm_nodes", type=int, default=1,
                       help="nodes per experiment: with --slurm_tasks_per_node, each experiment is one job of "
                            "nodes x tasks per node tasks, each task one rank of one training (srun)")
        g.add_argument("--slurm_tasks_per_node", type=int, default=1,
                       help="tasks (= ranks, one GPU each when GPUs are asked for) per node of each experiment's job")
        g.add_argument("--slurm_max_requeues", type=int, default=DEFAULT_MAX_REQUEUES,
                       help="requeue an experiment's job at most this many times per submission when its training "
                            "died (the trainer killed by a signal, exit code 75: another rank died or hung, 1: its "
                            "learner or coordinator died; not 2 = bad flags, nor 130 = a stop someone asked for): the "
                            "Slurm backend's --experiment_restarts. Each requeue restarts every task, which resumes "
                            "from rank 0's checkpoint. Time limits and preemptions do not count")
        g.add_argument("--slurm_restart_backoff_sec", type=float, default=DEFAULT_RESTART_BACKOFF_SEC,
                       help="seconds the job waits before its first requeue for a died training, doubled for each "
                            f"further one (at most {MAX_RESTART_BACKOFF_SEC:.0f} s; the state says 'restarting' "
                            "meanwhile): the Slurm backend's --restart_backoff_sec")
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
                          ("slurm_max_parallel", 0), ("slurm_max_timeouts", 0), ("slurm_nodes", 1),
                          ("slurm_tasks_per_node", 1), ("slurm_max_requeues", 0)):
            value = getattr(args, flag)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise RunnerError(f"--{flag}={value!r}: must be an integer >= {low}")
        backoff = args.slurm_restart_backoff_sec
        if not isinstance(backoff, (int, float)) or isinstance(backoff, bool) or not 0 <= backoff <= 1e6:
            raise RunnerError(f"--slurm_restart_backoff_sec={backoff!r}: must be a number of seconds >= 0")
        self.resources = job_resources(args)
        self.template = (parse_sbatch_template(args.slurm_sbatch_template) if args.slurm_sbatch_template
                         else SbatchTemplate())
        self.wait = bool(getattr(args, "slurm_wait", False))
        self.poll_sec = 2.0

    def _tasks_line(self) -> str:
        res = self.resources
        gpu = "its node's GPU cuda:<local rank>" if res.gpus else "the CPU"
        return (f"  srun: {res.tasks} tasks per experiment ({res.nodes} node(s) x {res.tasks_per_node}), "
                f"--kill-on-bad-exit=1; task i is rank i of the training (SLURM_PROCID) on {gpu}; rank 0 keeps "
                f"the checkpoints, task k>0 logs to .runner/logs/<experiment>.task<k>.log; "
                f"up to {self.args.slurm_max_requeues} requeue(s) when a rank is lost")

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
        if self.resources.tasks > 1:
            print(self._tasks_line())
        for option, value in self.template.directives.items():
            print(f"  sbatch (template): --{option}" + ("" if value is True else f"={value}"))
        for line in self.template.setup:
            print(f"  setup (template): {line}")
        print(f"  submitit folder: {self._workdir(specs)}")
        for i, spec in enumerate(specs):
            print(f"  array task {i}: {spec.name}: {format_command(spec, resolve_interpreter(spec.argv))}")

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
            # each submission gets --slurm_max_requeues requeues afresh
            write_state(spec, state="queued", backend="slurm", job_id=job.job_id, pid=None, returncode=None,
                        slurm_folder=str(job.paths.folder), tasks=self.resources.tasks, requeues=0, message=None,
                        failed_task=None)
        scancel = self._write_scancel_script(todo[0], run, array_id, len(todo))
        what = f"job array {array_id}" if len(todo) > 1 else f"job {array_id}"
        print(f"[runner] slurm: submitted {len(todo)} experiment(s) of run {run.run_name!r} as {what} "
              f"on partition {partition} ({timeout_min} min per job)")
        if self.resources.tasks > 1:
            print(self._tasks_line().replace("  srun:", "[runner] each job:", 1))
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
        try:
            executor = submitit.SlurmExecutor(folder=workdir / "%j", max_num_timeout=self.args.slurm_max_timeouts)
        except RuntimeError as e:  # no srun on PATH
            raise RunnerError(f"the slurm runner cannot submit from here: {e}") from None
        executor.update_parameters(**self.submitit_parameters(len(specs), run, partition, timeout_min))
        cwd = os.getcwd()
        try:
            # submitit prints sbatch's complaints to stderr and also raises them: keep only the error
            with contextlib.redirect_stderr(io.StringIO()), executor.batch():
                futures = [executor.submit(self._job(s, cwd)) for s in specs]
        except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError, OSError) as e:
            # sbatch's refusal comes back as a submitit error carrying sbatch's stderr
            raise RunnerError(f"sbatch refused the job array of run {run.run_name!r}: {str(e).strip()}") from None
        return futures

    def submitit_parameters(self, count: int, run: RunDescription, partition: str | None,
                            timeout_min: int) -> dict[str, Any]:
        """The parameters of ``submitit.SlurmExecutor.update_parameters`` for a job array of ``count``
        experiments: what the sbatch script and its srun line say."""
        res = self.resources
        params: dict[str, Any] = dict(
            job_name=run.run_name, partition=partition, time=timeout_min, cpus_per_task=res.cpus,
            signal_delay_s=res.signal_delay_sec, array_parallelism=res.max_parallel or count,
            stderr_to_stdout=True,
        )
        if res.tasks > 1:
            params["nodes"] = res.nodes
            params["ntasks_per_node"] = res.tasks_per_node
            # a task that ends with an error (a trainer's real failure) ends every task at once instead
            # of leaving the other ranks waiting for it; a lost rank does not end its task (see job.py)
            params["srun_args"] = ["--kill-on-bad-exit=1"]
        if partition is None:
            del params["partition"]
        if res.gpus:
            params["gpus_per_node"] = res.gpus
        if self.template.directives:
            params["additional_parameters"] = dict(self.template.directives)
        # the job unpickles ExperimentJob: make it find this very sfx_runner, installed or not
        # (ExperimentJob takes the folder off PYTHONPATH again for the experiment's command)
        code_root = shlex.quote(str(Path(__file__).resolve().parents[2]))
        params["setup"] = [*self.template.setup, f"export {CODE_ROOT_VAR}={code_root}",
                           f"export PYTHONPATH={code_root}${{PYTHONPATH:+:$PYTHONPATH}}"]
        return params

    def sbatch_script(self, specs: list[ExperimentSpec], run: RunDescription, partition: str | None,
                      timeout_min: int, python: str = sys.executable) -> str:
        """The sbatch script submitit writes for this run's job array (its srun line included), made
        without a cluster by submitit's own function (for the golden files and for reading)."""
        from submitit.slurm.slurm import _make_sbatch_string

        folder = self._workdir(specs) / "%j"
        command = " ".join([shlex.quote(python), "-u -m submitit.core._submit", shlex.quote(str(folder))])
        params = self.submitit_parameters(len(specs), run, partition, timeout_min)
        return _make_sbatch_string(command=command, folder=folder, map_count=len(specs) if len(specs) > 1 else None,
                                   **params)

    def _job(self, spec: ExperimentSpec, cwd: str) -> ExperimentJob:
        res = self.resources
        # the trainer gets what it needs to save its checkpoint; keep some for requeueing
        stop_timeout = max(5.0, res.signal_delay_sec - min(30.0, res.signal_delay_sec / 4))
        return ExperimentJob(spec, resolve_interpreter(spec.argv), cwd, stop_timeout,
                             max_requeues=self.args.slurm_max_requeues,
                             restart_backoff_sec=float(self.args.slurm_restart_backoff_sec))

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
        restarts_seen = {spec.name: 0 for spec in specs}
        while True:
            queued = queued_job_ids()
            counts = {"finished": 0, "running": 0, "failed": 0, "queued": 0}
            for spec, job_id in zip(specs, ids, strict=True):
                state = read_state(spec) or {}
                self._say_restart(spec, state, restarts_seen)
                if _finished(spec):
                    counts["finished"] += 1
                elif job_id not in queued:
                    counts["failed"] += 1
                elif state.get("state") in ("running", "restarting"):
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
            failed_task = state.get("failed_task") or 0
            log = task_log_path(spec, failed_task)
            why = f"; {state['message']}" if state.get("message") else ""
            print(f"[runner] {spec.name}: FAILED (job {job_id}: Slurm state {slurm_state}, exit code "
                  f"{state.get('returncode') if state.get('returncode') is not None else exit_code}{why}); "
                  f"last lines of {log}:")
            for line in tail_lines(log):
                print(f"    {line}")
        print(f"[runner] slurm: {len(specs) - failures}/{len(specs)} finished, {failures} failed")
        return 1 if failures else 0


    @staticmethod
    def _say_restart(spec: ExperimentSpec, state: dict, seen: dict[str, int]) -> None:
        """One line per requeue of a died training (the processes backend's RESTART line), as the job records it."""
        requeues = int(state.get("requeues") or 0)
        if requeues <= seen[spec.name]:
            return
        seen[spec.name] = requeues
        last = state.get("last_restart") or {}
        returncode = last.get("returncode")
        how = last.get("why") or (describe_returncode(returncode) if isinstance(returncode, int) else "its training died")
        backoff = last.get("backoff_sec")
        print(f"[runner] RESTART {spec.name} ({how}): requeue {requeues} "
              f"of {state.get('max_requeues', '?')}" + (f" in {backoff:g} s" if isinstance(backoff, (int, float)) else "")
              + ", resuming from its last checkpoint", flush=True)


def job_resources(args: argparse.Namespace) -> JobResources:
    """What each experiment's job asks for, from the (range-checked) flags.

    One task: ``--slurm_gpus_per_job`` GPUs and ``--slurm_cpus_per_gpu`` CPUs per GPU (per job for 0 GPUs).
    Several tasks (``--slurm_nodes`` x ``--slurm_tasks_per_node`` > 1): every task is one rank of the
    training on one GPU of its node, so GPUs per node = tasks per node (or none with
    ``--slurm_gpus_per_job=0``) and CPUs per task = ``--slurm_cpus_per_gpu``.

    Raises:
        RunnerError: with several tasks, a GPU count that is neither 0, 1 nor one per task of the job.
    """
    gpus, nodes, per_node = args.slurm_gpus_per_job, args.slurm_nodes, args.slurm_tasks_per_node
    tasks = nodes * per_node
    if tasks > 1 and gpus not in (0, 1, tasks):
        raise RunnerError(f"--slurm_gpus_per_job={gpus} with --slurm_nodes={nodes} x --slurm_tasks_per_node="
                          f"{per_node}: each task is one rank on one GPU, so use 1 (one GPU per task), {tasks} "
                          f"(the job's total, the same) or 0 (CPU-only ranks)")
    common = dict(partition=args.slurm_partition or None, timeout_min=parse_timeout_min(args.slurm_timeout),
                  signal_delay_sec=args.slurm_signal_delay_sec, max_parallel=args.slurm_max_parallel)
    if tasks == 1:
        return JobResources(cpus=args.slurm_cpus_per_gpu * max(gpus, 1), gpus=gpus, **common)
    return JobResources(cpus=args.slurm_cpus_per_gpu, gpus=per_node if gpus else 0, nodes=nodes,
                        tasks_per_node=per_node, **common)


def _finished(spec: ExperimentSpec) -> bool:
    """The experiment's command ended well: the trainer's ``done`` file, or (for other programs,
    which write none) exit code 0 recorded by its job."""
    return experiment_finished(spec) or (read_state(spec) or {}).get("state") == "finished"


__all__ = [
    "CODE_ROOT_VAR", "DEFAULT_MAX_REQUEUES", "DEFAULT_TIMEOUT_MIN", "LOG_TAIL_LINES", "RESERVED_SBATCH_OPTIONS",
    "RESUME_EXIT_CODE", "UNUSABLE_NODE_STATES", "ExperimentFailed", "ExperimentJob", "JobResources", "NodeInfo",
    "PartitionInfo", "SbatchTemplate", "SlurmBackend", "TaskPlace", "check_resources", "current_task",
    "gpus_in_gres", "job_resources", "parse_sbatch_template", "parse_timeout_min", "query_partitions",
    "queued_job_ids", "read_task_records", "sacct_states", "tail_lines", "task_log_path",
]
