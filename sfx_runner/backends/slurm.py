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
import time
from pathlib import Path
from typing import Any

from sfx_runner.backends.base import Backend, format_command, parse_bool
from sfx_runner.errors import RunnerError
from sfx_runner.run_description import ExperimentSpec, RunDescription, resolve_interpreter
# every name of the sections, re-exported (this was one module; submitit pickles ExperimentJob by this path)
from sfx_runner.slurm.cluster import (UNUSABLE_NODE_STATES, NodeInfo, PartitionInfo, _describe_nodes, _run,
                                      gpus_in_gres, query_partitions)
from sfx_runner.slurm.flags import RESERVED_SBATCH_OPTIONS, SbatchTemplate, parse_sbatch_template, parse_timeout_min
from sfx_runner.slurm.job import (CODE_ROOT_VAR, LOG_TAIL_LINES, ExperimentFailed, ExperimentJob, _child_signals,
                                  _current_job_id, _experiment_env, _preemption_signal, tail_lines)
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


__all__ = [
    "CODE_ROOT_VAR", "DEFAULT_TIMEOUT_MIN", "LOG_TAIL_LINES", "RESERVED_SBATCH_OPTIONS", "UNUSABLE_NODE_STATES",
    "ExperimentFailed", "ExperimentJob", "JobResources", "NodeInfo", "PartitionInfo", "SbatchTemplate", "SlurmBackend",
    "check_resources", "gpus_in_gres", "parse_sbatch_template", "parse_timeout_min", "query_partitions",
    "queued_job_ids", "sacct_states", "tail_lines",
]
