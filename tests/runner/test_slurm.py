"""The slurm backend.

Fast tests: flag and template parsing, the fail-fast checks against made-up partitions, ``sinfo``
parsing (a stand-in ``sinfo``), the dry run and the job callable run outside Slurm.

Fast tests of multi-task jobs (--slurm_nodes / --slurm_tasks_per_node): flags, per-node checks, the
sbatch script against golden files (tests/runner/golden/; SFX_UPDATE_GOLDEN=1 rewrites them), and
the job callable as task 0 or task 1 of a step (srun's variables set by hand, stand-in scontrol and
scancel): logs per task, requeue on exit code 75 / a killed trainer, bounded, no requeue on errors.

Slow tests: against a REAL single-node Slurm cluster on this machine (scripts/local_slurm/start.sh,
root on Debian): a sweep to completion with a failing experiment, a job preempted (SIGTERM + the
warning signal) that checkpoints, requeues and resumes, a job that reaches its time limit and
resumes, GPUs / template / exact argv on the node, the fail-fast errors, relaunch and scancel.sh;
one training as 2 srun tasks (plain srun, then through the runner), and a rank's trainer killed:
the job is requeued and resumes from rank 0's checkpoint.
Without such a machine they skip, unless SFX_REQUIRE_SLURM=1 (set by all_tests.sh when it
started the cluster): then they fail.
"""

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from sfx_runner.backends import slurm
from sfx_runner.backends.slurm import (ExperimentFailed, ExperimentJob, JobResources, NodeInfo, PartitionInfo,
                                       check_resources, gpus_in_gres, parse_sbatch_template, parse_timeout_min,
                                       query_partitions)
from sfx_runner.cli import load_run_description, main
from sfx_runner.errors import RunnerError
from sfx_runner.state import log_path, read_state

REPO = Path(__file__).resolve().parents[2]
START_SCRIPT = REPO / "scripts" / "local_slurm" / "start.sh"

# 64 units: the width these jobs were timed with before the gym family's default became 512
TINY_TRAIN = ("python -m sfx.train --env=gym_CartPole-v1 --num_workers=1 --num_envs_per_worker=4 "
              "--serial_mode=True --device=cpu --hidden_size=64")
CPU_JOB = ["--runner=slurm", "--slurm_gpus_per_job=0", "--slurm_cpus_per_gpu=1"]

# a stand-in experiment: records its argv, some environment and its folder, then exits with EXIT_CODE
RECORDER = textwrap.dedent("""
    import json, os, sys
    args = dict(a.split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
    os.makedirs(args["--train_dir"], exist_ok=True)
    with open(os.path.join(args["--train_dir"], args["--experiment"] + ".rec.json"), "w") as f:
        json.dump({"argv": sys.argv[1:], "cwd": os.getcwd(),
                   "env": {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "TEMPLATE_MARK", "EXTRA",
                                                          "SLURM_JOB_ID", "SLURM_CPUS_PER_TASK", "PYTHONPATH",
                                                          "SFX_RUNNER_CODE_ROOT", "SLURM_PROCID", "SLURM_STEP_ID",
                                                          "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS")}}, f)
    print("recorder says goodbye")
    sys.exit(int(os.environ.get("EXIT_CODE", "0")))
""")


def write_run(tmp_path: Path, body: str, name: str = "slurm_run") -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("from sfx_runner import Experiment, ParamGrid, ParamList, RunDescription\n"
                    + textwrap.dedent(body))
    return path


def specs_of(run_file: Path, train_dir: Path):
    return load_run_description(str(run_file)).generate_experiments(train_dir)


# ============================================================================ fast: no cluster

@pytest.mark.parametrize("text, minutes", [
    ("0", 0), ("90", 90), ("1:30", 2), ("2:00:00", 120), ("0-02:00:00", 120), ("1-0", 1440),
    ("1-12:30", 2190), ("3-00:00:01", 4321), (45, 45),
])
def test_timeout_formats(text, minutes):
    assert parse_timeout_min(text) == minutes


@pytest.mark.parametrize("text", ["2h", "-5", "1:2:3:4", "", "1.5", "infinite"])
def test_bad_timeouts(text):
    with pytest.raises(RunnerError, match="--slurm_timeout"):
        parse_timeout_min(text)


def test_gpus_in_gres():
    assert gpus_in_gres("(null)") == 0
    assert gpus_in_gres("gpu:2") == 2
    assert gpus_in_gres("gpu:a100:4(S:0-1)") == 4
    assert gpus_in_gres("gpu:a100:4(S:0-1),gpu:v100:2,mps:100") == 6
    assert gpus_in_gres("tmpdisk:100") == 0


def test_sbatch_template(tmp_path):
    template = tmp_path / "t.sbatch"
    template.write_text(textwrap.dedent("""\
        #!/bin/bash
        # our cluster
        #SBATCH --account=rl
        #SBATCH --mem 64G
        #SBATCH   --exclusive
        #SBATCH --comment="two words"  # why
        #SBATCH --gres=nvme:1

        module load cuda/12.1
        export NCCL_DEBUG=WARN
    """))
    t = parse_sbatch_template(template)
    assert t.directives == {"account": "rl", "mem": "64G", "exclusive": True, "comment": "two words",
                            "gres": "nvme:1"}
    assert t.setup == ["module load cuda/12.1", "export NCCL_DEBUG=WARN"]


@pytest.mark.parametrize("line, message", [
    ("#SBATCH --partition=gpu", "--slurm_partition"),
    ("#SBATCH -t 10", "long option"),
    ("#SBATCH --time=10", "--slurm_timeout"),
    ("#SBATCH --cpus-per-task=4", "--slurm_cpus_per_gpu"),
    ("#SBATCH --gres=gpu:2", "--slurm_gpus_per_job"),
    ("#SBATCH --mem=1G --qos=x", "one long option"),
    ("#SBATCH --job-name=x", "the run's name"),
])
def test_sbatch_template_refuses(tmp_path, line, message):
    template = tmp_path / "t.sbatch"
    template.write_text(line + "\n")
    with pytest.raises(RunnerError, match=re.escape(message)):
        parse_sbatch_template(template)
    with pytest.raises(RunnerError, match="cannot be read"):
        parse_sbatch_template(tmp_path / "missing")


def partitions():
    return {
        "cpu": PartitionInfo("cpu", True, "up", None, [NodeInfo("c1", 64, 0, "idle"), NodeInfo("c2", 32, 0, "mixed")]),
        "gpu": PartitionInfo("gpu", False, "up", 2880, [NodeInfo("g1", 80, 8, "allocated"),
                                                        NodeInfo("g2", 128, 8, "drained")]),
        "old": PartitionInfo("old", False, "down", None, [NodeInfo("o1", 8, 0, "idle")]),
        "dead": PartitionInfo("dead", False, "up", None, [NodeInfo("d1", 8, 0, "down*")]),
    }


def res(**kw):
    base = dict(partition=None, cpus=1, gpus=0, timeout_min=0, signal_delay_sec=120, max_parallel=0)
    base.update(kw)
    return JobResources(**base)


def test_check_resources_accepts_what_a_node_offers():
    assert check_resources(res(cpus=64), partitions()) == ("cpu", slurm.DEFAULT_TIMEOUT_MIN)
    assert check_resources(res(partition="gpu", cpus=80, gpus=8), partitions()) == ("gpu", 2880)
    assert check_resources(res(partition="gpu", cpus=16, gpus=1, timeout_min=60), partitions()) == ("gpu", 60)


@pytest.mark.parametrize("kw, message", [
    (dict(partition="gpuu"), "--slurm_partition='gpuu': no such partition; partitions: cpu (default), gpu, old, dead"),
    (dict(cpus=65), "partition 'cpu' has no node with 65 CPUs and 0 GPUs per job"),
    (dict(gpus=1, cpus=16), "partition 'cpu' has no node with 16 CPUs and 1 GPUs"),
    # the 128-CPU node is drained: it does not count
    (dict(partition="gpu", gpus=8, cpus=128), "it has 1 node with 80 CPUs and 8 GPUs"),
    (dict(partition="gpu", gpus=9, cpus=9), "no node with 9 CPUs and 9 GPUs"),
    (dict(partition="gpu", gpus=1, cpus=1, timeout_min=2881), "above the time limit of partition 'gpu' (2880 min)"),
    (dict(partition="old"), "partition 'old' is down"),
    (dict(partition="dead"), "partition 'dead' has no usable node"),
    (dict(timeout_min=2, signal_delay_sec=120), "--slurm_signal_delay_sec=120 is not below"),
])
def test_check_resources_fails_fast(kw, message):
    with pytest.raises(RunnerError, match=re.escape(message)):
        check_resources(res(**kw), partitions())


def test_no_default_partition():
    parts = partitions()
    parts["cpu"].default = False
    with pytest.raises(RunnerError, match="no default partition: choose one with --slurm_partition"):
        check_resources(res(), parts)


def test_sinfo_output_is_parsed(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "sinfo"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\ncat <<'EOF'\n"
                    "batch*|up|1-00:00:00|n1|48|(null)|idle\n"
                    "batch*|up|1-00:00:00|n2|48|(null)|mixed\n"
                    "a100|up|infinite|g1|64|gpu:a100:4(S:0-1)|idle\n"
                    "EOF\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    parts = query_partitions()
    assert list(parts) == ["batch", "a100"]
    assert parts["batch"].default and parts["batch"].max_time_min == 1440 and len(parts["batch"].nodes) == 2
    assert parts["a100"].max_time_min is None and parts["a100"].nodes[0].gpus == 4
    fake.write_text("#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller' >&2\nexit 1\n")
    with pytest.raises(RunnerError, match="Unable to contact slurm controller"):
        query_partitions()
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    with pytest.raises(RunnerError, match="sinfo not found: the slurm runner needs the Slurm client commands"):
        query_partitions()


def test_dry_run_needs_no_cluster(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))  # no sbatch, no sinfo
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("dry", [Experiment("cp", {TINY_TRAIN!r}, ParamGrid([("seed", [1, 2])]))])
    """)
    template = tmp_path / "t.sbatch"
    template.write_text("#SBATCH --account=rl\nmodule load cuda\n")
    rc = main([f"--run={run_file}", f"--train_dir={tmp_path / 'td'}", "--runner=slurm", "--dry_run",
               "--slurm_gpus_per_job=2", "--slurm_cpus_per_gpu=8", "--slurm_timeout=0-01:30:00",
               "--slurm_max_parallel=1", f"--slurm_sbatch_template={template}"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "cpus-per-task=16 gpus-per-node=2 time=90 min signal=USR2@120s array=0-1%1 job-name=dry" in out
    assert "sbatch (template): --account=rl" in out and "setup (template): module load cuda" in out
    assert f"array task 0: 00_cp_see=1: {sys.executable} -m sfx.train" in out
    assert not (tmp_path / "td").exists()


@pytest.mark.parametrize("flag, message", [
    ("--slurm_gpus_per_job=-1", "--slurm_gpus_per_job=-1: must be an integer >= 0"),
    ("--slurm_cpus_per_gpu=0", "--slurm_cpus_per_gpu=0: must be an integer >= 1"),
    ("--slurm_timeout=soon", "--slurm_timeout='soon' is not a time limit"),
    ("--slurm_max_parallel=-2", "--slurm_max_parallel=-2"),
])
def test_bad_flags_exit_2(tmp_path, capsys, flag, message):
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("bad", [Experiment("cp", {TINY_TRAIN!r})])
    """)
    assert main([f"--run={run_file}", f"--train_dir={tmp_path / 'td'}", "--runner=slurm", flag]) == 2
    assert message in capsys.readouterr().err


def _job(tmp_path: Path, body: str, env_vars=None, **kw) -> tuple[ExperimentJob, object]:
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("direct", [Experiment("rec", "python rec.py --note='a b \\"c\\" $d'",
                                                               env_vars={env_vars or {}!r})])
    """)
    (tmp_path / "rec.py").write_text(body)
    (spec,) = specs_of(run_file, tmp_path / "td")
    kw.setdefault("restart_backoff_sec", 0.0)  # requeues at once unless a test times the backoff
    return ExperimentJob(spec, [sys.executable, *spec.argv[1:]], str(tmp_path), stop_timeout_sec=5, **kw), spec


def test_job_callable_outside_slurm(tmp_path, monkeypatch):
    """The array task's callable, run directly: exact argv, env vars, log with a header, state."""
    for var in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_STEP_ID"):
        monkeypatch.delenv(var, raising=False)
    job, spec = _job(tmp_path, RECORDER, env_vars={"EXTRA": "x y"})
    old = signal.getsignal(signal.SIGTERM)
    assert job() == {"experiment": spec.name, "returncode": 0, "attempts": 1}
    assert signal.getsignal(signal.SIGTERM) is old  # the test process' handler is given back
    rec = json.loads((spec.train_dir / f"{spec.name}.rec.json").read_text())
    assert rec["argv"] == spec.argv[2:] and '--note=a b "c" $d' in rec["argv"]
    assert rec["env"]["EXTRA"] == "x y" and rec["cwd"] == str(tmp_path)
    state = read_state(spec)
    assert (state["state"], state["returncode"], state["attempts"], state["backend"]) == ("finished", 0, 1, "slurm")
    log = log_path(spec).read_text()
    assert log.startswith("[runner] attempt 1: slurm job None on ") and "recorder says goodbye" in log
    # a second run (a requeue) counts attempts and appends to the same log
    job()
    assert read_state(spec)["attempts"] == 2 and log_path(spec).read_text().count("[runner] attempt") == 2
    # what submitit pickles: configuration only, never the running process
    clone = pickle.loads(pickle.dumps(job))
    assert clone.argv == job.argv and clone._proc is None
    delayed = clone.checkpoint()
    assert isinstance(delayed.function, ExperimentJob) and delayed.function.spec == spec


def test_experiment_env_drops_only_what_the_job_script_added():
    from sfx_runner.backends.slurm import CODE_ROOT_VAR, _experiment_env
    env = {CODE_ROOT_VAR: "/c", "PYTHONPATH": "/c:/mine", "A": "1"}
    assert _experiment_env(env) == {"PYTHONPATH": "/mine", "A": "1"}
    assert _experiment_env({CODE_ROOT_VAR: "/c", "PYTHONPATH": "/c"}) == {}
    assert _experiment_env({CODE_ROOT_VAR: "/c", "PYTHONPATH": "/other:/c"}) == {"PYTHONPATH": "/other:/c"}
    assert _experiment_env({"PYTHONPATH": "/c"}) == {"PYTHONPATH": "/c"}


def test_job_callable_failure(tmp_path, monkeypatch):
    """Outside a Slurm job: exit code 2 fails as an error; any other (a died training, requeued inside a job)
    fails for want of a job to requeue."""
    monkeypatch.setenv("EXIT_CODE", "2")
    for var in ("SLURM_STEP_ID", "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(var, raising=False)
    job, spec = _job(tmp_path, RECORDER)
    with pytest.raises(ExperimentFailed, match=rf"experiment {spec.name} exited with code 2; last lines"):
        job()
    state = read_state(spec)
    assert (state["state"], state["returncode"]) == ("failed", 2)
    monkeypatch.setenv("EXIT_CODE", "3")
    with pytest.raises(ExperimentFailed, match=re.escape("the trainer of task 0 ended (exit code 3); not in a Slurm "
                                                         "job, nothing to requeue")):
        job()
    assert (read_state(spec)["state"], read_state(spec)["returncode"]) == ("failed", 3)


def test_job_callable_forwards_sigterm_outside_a_slurm_step(tmp_path):
    """Outside a Slurm step SIGTERM goes on to the trainer; the warning signal never reaches it."""
    child = textwrap.dedent("""
        import signal, sys, time
        out = open("got.txt", "w")
        def stop(sig, frame):
            out.write("got %s" % signal.Signals(sig).name); out.close(); sys.exit(130)
        signal.signal(signal.SIGTERM, stop)
        print("ready", flush=True)
        while True: time.sleep(0.1)
    """)
    job, spec = _job(tmp_path, child, wait_after_sigterm_sec=0.5)
    pickled = tmp_path / "job.pkl"
    pickled.write_bytes(pickle.dumps(job))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PYTHONPATH"] = str(REPO)
    wrapper = subprocess.Popen([sys.executable, "-c", "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))()",
                                str(pickled)], env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while "ready" not in (log_path(spec).read_text() if log_path(spec).exists() else ""):
        assert time.time() < deadline and wrapper.poll() is None
        time.sleep(0.05)
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(timeout=30) == 128 + signal.SIGTERM
    assert (tmp_path / "got.txt").read_text() == "got SIGTERM"
    assert read_state(spec)["state"] == "interrupted" and read_state(spec)["returncode"] == 130
    assert "SIGTERM (cancelled, preempted or at the time limit), trainer stopped (exit code 130)" in \
        log_path(spec).read_text()


# ============================================================================ fast: multi-task jobs (no cluster)

GOLDEN = Path(__file__).resolve().parent / "golden"


def backend_for(flags: list[str]) -> slurm.SlurmBackend:
    from sfx_runner.cli import build_parser
    args = build_parser("slurm").parse_args(["--run=unused", "--runner=slurm", "--train_dir=/train_dir", *flags])
    return slurm.SlurmBackend(args)


@pytest.mark.parametrize("flags, nodes, per_node, cpus, gpus", [
    ([], 1, 1, 16, 1),  # one task: as before
    (["--slurm_gpus_per_job=2", "--slurm_cpus_per_gpu=8"], 1, 1, 16, 2),
    (["--slurm_nodes=2", "--slurm_tasks_per_node=4"], 2, 4, 16, 4),  # one GPU per task
    (["--slurm_nodes=2", "--slurm_tasks_per_node=4", "--slurm_gpus_per_job=8", "--slurm_cpus_per_gpu=10"], 2, 4, 10, 4),
    (["--slurm_tasks_per_node=2", "--slurm_gpus_per_job=0", "--slurm_cpus_per_gpu=1"], 1, 2, 1, 0),
    (["--slurm_nodes=3", "--slurm_gpus_per_job=0", "--slurm_cpus_per_gpu=4"], 3, 1, 4, 0),
])
def test_job_resources_of_the_flags(flags, nodes, per_node, cpus, gpus):
    """Several tasks: one rank per task, one GPU per task (GPUs per node = tasks per node), CPUs per task."""
    r = backend_for(flags).resources
    assert (r.nodes, r.tasks_per_node, r.tasks, r.cpus, r.gpus) == (nodes, per_node, nodes * per_node, cpus, gpus)


@pytest.mark.parametrize("flag, message", [
    ("--slurm_nodes=0", "--slurm_nodes=0: must be an integer >= 1"),
    ("--slurm_tasks_per_node=-1", "--slurm_tasks_per_node=-1: must be an integer >= 1"),
    ("--slurm_max_requeues=-1", "--slurm_max_requeues=-1: must be an integer >= 0"),
    ("--slurm_restart_backoff_sec=-1", "--slurm_restart_backoff_sec=-1.0: must be a number of seconds >= 0"),
    ("--slurm_nodes=two", "--slurm_nodes: invalid int value: 'two'"),
])
def test_bad_task_flags_exit_2(tmp_path, capsys, flag, message):
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("bad", [Experiment("cp", {TINY_TRAIN!r})])
    """)
    assert main([f"--run={run_file}", f"--train_dir={tmp_path / 'td'}", "--runner=slurm", "--dry_run", flag]) == 2
    assert message in capsys.readouterr().err


def test_gpus_that_are_not_one_per_task_are_refused():
    with pytest.raises(RunnerError, match=re.escape(
            "--slurm_gpus_per_job=2 with --slurm_nodes=2 x --slurm_tasks_per_node=4: each task is one rank on one "
            "GPU, so use 1 (one GPU per task), 8 (the job's total, the same) or 0 (CPU-only ranks)")):
        backend_for(["--slurm_nodes=2", "--slurm_tasks_per_node=4", "--slurm_gpus_per_job=2"])


def multi(**kw):
    base = dict(partition="gpu", cpus=10, gpus=4, nodes=2, tasks_per_node=4)
    base.update(kw)
    return res(**base)


def test_check_resources_per_node_for_several_tasks():
    parts = partitions()
    parts["gpu"].nodes.append(NodeInfo("g3", 40, 4, "idle"))
    # g1 (80 CPUs, 8 GPUs) and g3 (40 CPUs, 4 GPUs) each take 4 tasks x 10 CPUs and 4 GPUs; g2 is drained
    assert check_resources(multi(), parts) == ("gpu", 2880)
    with pytest.raises(RunnerError, match=re.escape(
            "--slurm_nodes=2: partition 'gpu' has only 1 usable node with 44 CPUs and 4 GPUs per node "
            "(4 tasks x 11 CPUs: --slurm_tasks_per_node=4, --slurm_cpus_per_gpu=11; one GPU per task); "
            "it has 1 node with 80 CPUs and 8 GPUs, 1 node with 40 CPUs and 4 GPUs")):
        check_resources(multi(cpus=11), parts)
    with pytest.raises(RunnerError, match=re.escape("--slurm_nodes=3: partition 'gpu' has only 2 usable nodes")):
        check_resources(multi(nodes=3), parts)
    with pytest.raises(RunnerError, match=re.escape(
            "partition 'gpu' has no node with 90 CPUs and 9 GPUs per node (9 tasks x 10 CPUs")):
        check_resources(multi(tasks_per_node=9, gpus=9, nodes=1), parts)
    # CPU-only ranks on the default partition: 2 tasks x 32 CPUs fit c1 (64) but not c2 (32)
    assert check_resources(multi(partition=None, cpus=32, gpus=0, nodes=1, tasks_per_node=2), parts)[0] == "cpu"
    with pytest.raises(RunnerError, match=re.escape(
            "--slurm_nodes=2: partition 'cpu' has only 1 usable node with 64 CPUs and 0 GPUs per node "
            "(2 tasks x 32 CPUs: --slurm_tasks_per_node=2, --slurm_cpus_per_gpu=32; no GPU, --slurm_gpus_per_job=0)")):
        check_resources(multi(partition=None, cpus=32, gpus=0, nodes=2, tasks_per_node=2), parts)


@pytest.mark.parametrize("line, flag", [
    ("#SBATCH --nodes=2", "--slurm_nodes"), ("#SBATCH --ntasks-per-node=4", "--slurm_tasks_per_node"),
    ("#SBATCH --ntasks=8", "--slurm_nodes and --slurm_tasks_per_node"),
])
def test_sbatch_template_refuses_task_layout(tmp_path, line, flag):
    template = tmp_path / "t.sbatch"
    template.write_text(line + "\n")
    with pytest.raises(RunnerError, match=re.escape(f"which the slurm runner sets itself (use {flag})")):
        parse_sbatch_template(template)


def test_dry_run_shows_the_tasks(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("dry", [Experiment("cp", {TINY_TRAIN!r})])
    """)
    assert main([f"--run={run_file}", f"--train_dir={tmp_path / 'td'}", "--runner=slurm", "--dry_run",
                 "--slurm_nodes=2", "--slurm_tasks_per_node=4", "--slurm_cpus_per_gpu=10"]) == 0
    out = capsys.readouterr().out
    assert "nodes=2 ntasks-per-node=4 cpus-per-task=10 gpus-per-node=4 time=the partition's limit" in out
    assert ("srun: 8 tasks per experiment (2 node(s) x 4), --kill-on-bad-exit=1; task i is rank i of the training "
            "(SLURM_PROCID) on its node's GPU cuda:<local rank>") in out
    assert "up to 3 requeue(s) when a rank is lost" in out


GOLDEN_CASES = {
    # name: (flags, experiments); the python and the code folder are normalised
    "sbatch_2nodes_x_4gpus.sh": (["--slurm_nodes=2", "--slurm_tasks_per_node=4", "--slurm_cpus_per_gpu=10",
                                  "--slurm_signal_delay_sec=300"], 2),
    "sbatch_1node_x_2cpu_tasks.sh": (["--slurm_tasks_per_node=2", "--slurm_gpus_per_job=0",
                                      "--slurm_cpus_per_gpu=1"], 1),
    "sbatch_1task_1gpu.sh": ([], 2),  # a single-task job, as before multi-task jobs existed
}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_sbatch_scripts_match_the_golden_files(name):
    """The sbatch script (and its srun line) submitit writes for each experiment's job, made without a
    cluster by submitit's own function from the parameters the backend submits with. To accept a change
    (a new submitit, a new option): SFX_UPDATE_GOLDEN=1 pytest tests/runner/test_slurm.py -k golden, and
    review the diff of tests/runner/golden/."""
    pytest.importorskip("submitit")
    from sfx_runner import Experiment, ParamGrid, RunDescription
    flags, count = GOLDEN_CASES[name]
    grid = ParamGrid([("seed", list(range(1, count + 1)))]) if count > 1 else None
    run = RunDescription("golden", [Experiment("cp", "python -m sfx.train --env=gym_CartPole-v1", grid)])
    specs = run.generate_experiments("/train_dir")
    text = backend_for(flags).sbatch_script(specs, run, "gpu", 120, python="/venv/bin/python")
    text = text.replace(str(REPO), "/src/sfx") + "\n"
    path = GOLDEN / name
    if os.environ.get("SFX_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path} is missing: SFX_UPDATE_GOLDEN=1 writes it"
    assert text == path.read_text(), f"the sbatch script differs from {path} (SFX_UPDATE_GOLDEN=1 rewrites it)"


def test_golden_files_say_what_matters():
    """What the golden files are for, said once more in words: layout, GPUs, srun line, array."""
    two_by_four = (GOLDEN / "sbatch_2nodes_x_4gpus.sh").read_text()
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --gpus-per-node=4",
                 "#SBATCH --cpus-per-task=10", "#SBATCH --array=0-1%2", "#SBATCH --signal=USR2@300"):
        assert line in two_by_four.splitlines()
    srun = [line for line in two_by_four.splitlines() if line.startswith("srun ")]
    assert len(srun) == 1 and "--kill-on-bad-exit=1" in srun[0] and "submitit.core._submit" in srun[0]
    cpu = (GOLDEN / "sbatch_1node_x_2cpu_tasks.sh").read_text().splitlines()
    assert "#SBATCH --ntasks-per-node=2" in cpu and "#SBATCH --cpus-per-task=1" in cpu
    assert not any("gpus" in line or "--array" in line for line in cpu)
    single = (GOLDEN / "sbatch_1task_1gpu.sh").read_text()
    assert "ntasks" not in single and "kill-on-bad-exit" not in single and "#SBATCH --nodes=1" in single


@pytest.mark.parametrize("env, place", [
    ({}, (0, 1)),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, (0, 1)),  # the batch script: no step, one process
    ({"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "1"}, (0, 1)),
    ({"SLURM_PROCID": "5", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "8", "SLURM_NTASKS": "8"}, (5, 8)),
    ({"SLURM_PROCID": "1", "SLURM_STEPID": "0", "SLURM_NTASKS": "2"}, (1, 2)),
])
def test_current_task(env, place):
    task = slurm.current_task(env)
    assert (task.index, task.count) == place


def test_trainer_outcomes():
    from sfx_runner.slurm.job import trainer_outcome as outcome
    assert outcome(0, False) == "finished" and outcome(0, True) == "finished"
    assert outcome(75, False) == outcome(-9, False) == outcome(-11, False) == outcome(137, False) == "resume"
    # 1: a learner or coordinator that died (sfx.train's "failed"): requeued like a lost rank
    assert outcome(1, False) == outcome(3, False) == "resume"
    assert outcome(2, False) == outcome(130, False) == "failed"
    assert outcome(130, True) == outcome(75, True) == outcome(-9, True) == "stopped"
    assert slurm.RESUME_EXIT_CODE == 75


STAND_IN_SLURM = """#!/bin/sh
echo "$(basename "$0") $*" >> "{calls}"
{extra}
"""


def stand_in_slurm_commands(tmp_path: Path, monkeypatch, scancel_extra: str = "") -> Path:
    """``scontrol`` and ``scancel`` that record their arguments (scancel may do more)."""
    calls = tmp_path / "slurm_calls.txt"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, extra in (("scontrol", ""), ("scancel", scancel_extra)):
        (bin_dir / name).write_text(STAND_IN_SLURM.format(calls=calls, extra=extra))
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def as_task(monkeypatch, index: int, count: int, job_id: str = "4242", restart: int = 0) -> None:
    """The environment srun gives task ``index`` of a ``count``-task step of job ``job_id``."""
    for var in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_STEPID"):
        monkeypatch.delenv(var, raising=False)
    for var, value in (("SLURM_JOB_ID", job_id), ("SLURM_STEP_ID", "0"), ("SLURM_PROCID", str(index)),
                       ("SLURM_LOCALID", str(index)), ("SLURM_STEP_NUM_TASKS", str(count)),
                       ("SLURM_NTASKS", str(count)), ("SLURM_RESTART_COUNT", str(restart))):
        monkeypatch.setenv(var, value)


EXITS_WITH = textwrap.dedent("""
    import os, sys
    print("rank", os.environ.get("SLURM_PROCID"), "of", os.environ.get("SLURM_STEP_NUM_TASKS"), flush=True)
    sys.exit(int(os.environ["EXIT_CODE"]))
""")


def test_task_1_runs_its_rank_and_writes_only_its_own_files(tmp_path, monkeypatch):
    """Task 1 of 2: the trainer sees srun's step variables (it becomes rank 1), the output goes to the task's
    own log, its record says how the trainer ended, the runner state is task 0's alone."""
    as_task(monkeypatch, 1, 2)
    job, spec = _job(tmp_path, RECORDER)
    assert job() == {"experiment": spec.name, "returncode": 0, "task": 1}
    rec = json.loads((spec.train_dir / f"{spec.name}.rec.json").read_text())["env"]
    assert (rec["SLURM_PROCID"], rec["SLURM_STEP_ID"], rec["SLURM_LOCALID"], rec["SLURM_STEP_NUM_TASKS"]) == \
        ("1", "0", "1", "2")
    assert read_state(spec) is None  # task 0 owns the state
    assert not log_path(spec).exists()
    log = slurm.task_log_path(spec, 1).read_text()
    assert log.startswith("[runner] slurm job 4242 task 1 of 2 (restart 0) on ") and "recorder says goodbye" in log
    record = slurm.read_task_records(spec)[1]
    assert (record["outcome"], record["returncode"], record["attempt"], record["tasks"]) == ("finished", 0, "4242:0", 2)


def test_task_0_of_a_single_task_job_is_as_before(tmp_path, monkeypatch):
    """A one-task step (what every job was before): the trainer sees a one-task step, no task files."""
    as_task(monkeypatch, 0, 1)
    job, spec = _job(tmp_path, RECORDER)
    assert job() == {"experiment": spec.name, "returncode": 0, "attempts": 1}
    assert json.loads((spec.train_dir / f"{spec.name}.rec.json").read_text())["env"]["SLURM_STEP_NUM_TASKS"] == "1"
    assert log_path(spec).read_text().startswith("[runner] attempt 1: slurm job 4242 on ")
    assert slurm.read_task_records(spec) == {} and read_state(spec)["state"] == "finished"


def test_task_0_requeues_the_job_when_a_rank_is_lost_at_most_max_requeues_times(tmp_path, monkeypatch):
    calls = stand_in_slurm_commands(tmp_path, monkeypatch)
    as_task(monkeypatch, 0, 2)
    monkeypatch.setenv("EXIT_CODE", "75")
    job, spec = _job(tmp_path, EXITS_WITH, max_requeues=2)
    for restart in range(2):
        monkeypatch.setenv("SLURM_RESTART_COUNT", str(restart))
        with pytest.raises(SystemExit) as stop:
            job()
        assert stop.value.code == 75
        state = read_state(spec)
        assert (state["state"], state["returncode"], state["requeues"], state["attempts"]) == \
            ("queued", 75, restart + 1, restart + 1)
    assert calls.read_text() == "scontrol requeue 4242\n" * 2
    log = log_path(spec).read_text()
    assert log.startswith("[runner] attempt 1: slurm job 4242 task 0 of 2 on ")
    assert f"2 tasks, one rank each; the trainer of task 1 writes to {spec.name}.task1.log" in log
    assert ("the trainer of task 0 ended (exit code 75: another rank died or hung): requeueing the job "
            "(requeue 2 of at most 2) in 0 s; every task starts again") in log
    # a third loss: no more requeues, the experiment fails with a clear line
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    with pytest.raises(ExperimentFailed, match=re.escape(
            "the job was requeued 2 time(s) for died trainings already (--slurm_max_requeues=2): not again")):
        job()
    assert calls.read_text().count("requeue") == 2
    state = read_state(spec)
    assert (state["state"], state["returncode"], state["requeues"], state["failed_task"]) == ("failed", 75, 2, 0)
    assert "not again: the experiment failed" in log_path(spec).read_text()


def test_a_killed_trainer_requeues_a_single_task_job_too(tmp_path, monkeypatch):
    calls = stand_in_slurm_commands(tmp_path, monkeypatch)
    as_task(monkeypatch, 0, 1, job_id="77")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "70")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    job, spec = _job(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    with pytest.raises(SystemExit):
        job()
    assert calls.read_text() == "scontrol requeue 70_3\n"  # the array task, as squeue shows it
    assert read_state(spec)["returncode"] == -signal.SIGKILL and read_state(spec)["requeues"] == 1
    assert "the trainer of task 0 ended (killed by SIGKILL): requeueing the job" in log_path(spec).read_text()


def test_errors_are_not_requeued(tmp_path, monkeypatch):
    """Exit code 2 (bad flags, an unreadable checkpoint) is a real error: no requeue, even with requeues left."""
    calls = stand_in_slurm_commands(tmp_path, monkeypatch)
    as_task(monkeypatch, 0, 2)
    monkeypatch.setenv("EXIT_CODE", "2")
    job, spec = _job(tmp_path, EXITS_WITH)
    with pytest.raises(ExperimentFailed, match=rf"experiment {spec.name} exited with code 2"):
        job()
    assert not calls.exists()
    assert (read_state(spec)["state"], read_state(spec)["returncode"]) == ("failed", 2)
    # the same on task 1: it fails at once (srun --kill-on-bad-exit then ends task 0)
    as_task(monkeypatch, 1, 2)
    with pytest.raises(ExperimentFailed, match=rf"experiment {spec.name}: the trainer of task 1 exited with code 2"):
        job()
    assert not calls.exists() and slurm.read_task_records(spec)[1]["outcome"] == "failed"
    assert "the other tasks are ended (srun --kill-on-bad-exit)" in slurm.task_log_path(spec, 1).read_text()


def write_record(spec, index: int, outcome: str, returncode: int, attempt: str = "4242:0") -> None:
    from sfx_runner.slurm.job import task_record_path
    from sfx_runner.state import atomic_write_json
    atomic_write_json(task_record_path(spec, index), {"task": index, "tasks": 2, "attempt": attempt,
                                                      "outcome": outcome, "returncode": returncode})


def test_task_0_reads_the_other_tasks_records(tmp_path, monkeypatch):
    """Rank 0's error after rank 1 was lost is the loss seen from rank 0: requeue. A real error of rank 1:
    fail, naming task 1. Records of an earlier attempt do not count."""
    calls = stand_in_slurm_commands(tmp_path, monkeypatch)
    as_task(monkeypatch, 0, 2)
    monkeypatch.setenv("EXIT_CODE", "2")
    job, spec = _job(tmp_path, EXITS_WITH)
    write_record(spec, 1, "resume", -9, attempt="4242:5")  # another attempt
    with pytest.raises(ExperimentFailed, match="exited with code 2"):
        job()
    write_record(spec, 1, "resume", -9)
    with pytest.raises(SystemExit):
        job()
    assert calls.read_text() == "scontrol requeue 4242\n"
    assert "the trainer of task 1 ended (killed by SIGKILL): requeueing the job" in log_path(spec).read_text()
    write_record(spec, 1, "failed", 2)
    monkeypatch.setenv("EXIT_CODE", "75")
    with pytest.raises(ExperimentFailed, match=re.escape("the trainer of task 1 failed (exit code 2; see ")):
        job()
    state = read_state(spec)
    assert (state["state"], state["failed_task"], state["returncode"]) == ("failed", 1, 2)
    assert calls.read_text().count("requeue") == 1


def test_requeue_outside_slurm_or_refused_fails_clearly(tmp_path, monkeypatch):
    for var in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_STEP_ID", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EXIT_CODE", "75")
    job, spec = _job(tmp_path, EXITS_WITH)
    with pytest.raises(ExperimentFailed, match="not in a Slurm job, nothing to requeue"):
        job()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho 'Requested operation is presently disabled' >&2\nexit 1\n")
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    as_task(monkeypatch, 0, 2)
    with pytest.raises(ExperimentFailed, match="'scontrol requeue 4242' failed: Requested operation is presently"):
        job()
    assert read_state(spec)["state"] == "failed"


def _run_pickled_job(tmp_path: Path, job: ExperimentJob, env: dict) -> subprocess.Popen:
    pickled = tmp_path / "job.pkl"
    pickled.write_bytes(pickle.dumps(job))
    return subprocess.Popen([sys.executable, "-c", "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))()",
                             str(pickled)], env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)


WAITS_FOR_SIGINT = textwrap.dedent("""
    import signal, sys, time
    def stop(sig, frame):
        print("got", signal.Signals(sig).name, flush=True); sys.exit(130)
    signal.signal(signal.SIGINT, stop)
    print("ready", flush=True)
    while True: time.sleep(0.1)
""")


def test_task_1_stops_its_trainer_on_the_warning_signal(tmp_path, monkeypatch):
    """submitit leaves the warning signal to task 0; task 1 stops its own rank with SIGINT, then waits for
    the requeue (here: a SIGTERM, as Slurm sends when task 0 requeues the job)."""
    job, spec = _job(tmp_path, WAITS_FOR_SIGINT, wait_after_sigterm_sec=0.5)
    log = slurm.task_log_path(spec, 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(REPO), SLURM_JOB_ID="4242", SLURM_STEP_ID="0", SLURM_PROCID="1",
               SLURM_STEP_NUM_TASKS="2", SLURM_LOCALID="1")
    wrapper = _run_pickled_job(tmp_path, job, env)
    wait_for(lambda: "ready" in (log.read_text() if log.exists() else ""), 30, "the trainer to start")
    wrapper.send_signal(signal.SIGUSR2)
    wait_for(lambda: "task 0 requeues the job" in log.read_text(), 30, "the trainer to stop")
    assert wrapper.poll() is None  # waiting for Slurm to end the job
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(timeout=30) == 128 + signal.SIGTERM
    text = log.read_text()
    assert "got SIGINT" in text and "warning signal, trainer stopped (exit code 130); task 0 requeues the job" in text
    assert slurm.read_task_records(spec)[1]["outcome"] == "stopped" and read_state(spec) is None


def test_task_1_whose_rank_was_lost_asks_for_the_requeue_when_task_0_does_not(tmp_path, monkeypatch):
    """Task 1's trainer killed: task 1 waits rank_grace_sec for task 0 to requeue, then sends the job the
    warning signal (the stand-in scancel answers with the SIGTERM of a requeue)."""
    calls = stand_in_slurm_commands(tmp_path, monkeypatch, scancel_extra="kill -TERM $PPID")
    job, spec = _job(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", rank_grace_sec=1.0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(REPO), SLURM_JOB_ID="4242", SLURM_STEP_ID="0", SLURM_PROCID="1",
               SLURM_STEP_NUM_TASKS="2", SLURM_LOCALID="1")
    wrapper = _run_pickled_job(tmp_path, job, env)
    assert wrapper.wait(timeout=60) == 128 + signal.SIGTERM, wrapper.stderr.read()
    assert calls.read_text() == "scancel --signal=USR2 4242\n"
    log = slurm.task_log_path(spec, 1).read_text()
    assert "the trainer ended (killed by SIGKILL); waiting up to 1 s for task 0 to requeue the job" in log
    assert "the job was not requeued within 1 s: sending it SIGUSR2 so that task 0 stops rank 0" in log
    assert slurm.read_task_records(spec)[1]["outcome"] == "resume"


def test_task_1_whose_rank_another_rank_stopped_waits_for_the_requeue(tmp_path, monkeypatch):
    """Task 0's warning signal came first: its rank voted to stop, so rank 1 ended interrupted (130) before
    task 1's own signal. Not a failure (which would make srun end task 0 in the middle of its requeue): task 1
    records "stopped" and waits for the requeue's SIGTERM."""
    job, spec = _job(tmp_path, EXITS_WITH, wait_after_sigterm_sec=0.5)
    log = slurm.task_log_path(spec, 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(REPO), SLURM_JOB_ID="4242", SLURM_STEP_ID="0", SLURM_PROCID="1",
               SLURM_STEP_NUM_TASKS="2", SLURM_LOCALID="1", EXIT_CODE="130")
    wrapper = _run_pickled_job(tmp_path, job, env)
    wait_for(lambda: "task 0 requeues the job" in (log.read_text() if log.exists() else ""), 30,
             "the trainer to end")
    assert wrapper.poll() is None  # waiting for Slurm to end the job
    assert slurm.read_task_records(spec)[1]["outcome"] == "stopped"
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(timeout=30) == 128 + signal.SIGTERM, wrapper.stderr.read()
    assert "another rank's stop, trainer stopped (exit code 130); task 0 requeues the job" in log.read_text()
    assert read_state(spec) is None


def test_task_0_whose_rank_another_rank_stopped_requeues_when_its_warning_comes(tmp_path, monkeypatch):
    """Task 1's warning signal came first: rank 0 ended interrupted (130) before task 0's own signal. Task 0
    waits for it, and submitit's handler (here a stand-in that calls checkpoint() and exits, as submitit's
    does) requeues the job; when no signal comes (another rank stopped by hand), the experiment is
    interrupted, resumable, not failed."""
    pytest.importorskip("submitit")
    as_task(monkeypatch, 0, 2)
    monkeypatch.setenv("EXIT_CODE", "130")
    job, spec = _job(tmp_path, EXITS_WITH)
    write_record(spec, 1, "stopped", 130)  # task 1 stopped its rank on its warning signal
    requeued = []

    def submitits_handler(signum, frame):
        requeued.append(job.checkpoint())
        raise SystemExit(-1)

    def signal_once_task_0_waits():  # the signal comes after the trainer ended, however slowly it starts
        deadline = time.time() + 30
        while time.time() < deadline:
            if "waiting up to" in (log_path(spec).read_text() if log_path(spec).exists() else ""):
                os.kill(os.getpid(), signal.SIGUSR2)
                return
            time.sleep(0.05)

    old = signal.signal(signal.SIGUSR2, submitits_handler)
    sender = threading.Thread(target=signal_once_task_0_waits, daemon=True)
    try:
        sender.start()
        with pytest.raises(SystemExit) as stop:
            job()
    finally:
        sender.join(timeout=30)
        signal.signal(signal.SIGUSR2, old)
    assert stop.value.code == -1 and requeued and requeued[0] is not None
    log = log_path(spec).read_text()
    assert "the trainer ended at another rank's stop (exit code 130); waiting up to 5 s for the warning" in log
    assert "warning signal, trainer stopped (exit code 130); the job is requeued and resumes" in log
    assert read_state(spec)["state"] == "queued"
    # no signal within the wait: interrupted (the same command resumes it), not failed
    t0 = time.time()
    with pytest.raises(SystemExit) as stop:
        job()
    assert stop.value.code == 128 + signal.SIGTERM and time.time() - t0 >= 5
    assert (read_state(spec)["state"], read_state(spec)["returncode"]) == ("interrupted", 130)
    assert "no warning signal came; the experiment is interrupted" in log_path(spec).read_text()


def test_task_0_checkpoint_counts_a_requeue_asked_for_by_a_lost_rank(tmp_path, monkeypatch):
    """The warning signal that task 1 sent: task 0's checkpoint() requeues, counted, and refuses once the
    requeues are used up (submitit then ends the job)."""
    pytest.importorskip("submitit")
    as_task(monkeypatch, 0, 2)
    job, spec = _job(tmp_path, RECORDER, max_requeues=1)
    log_path(spec).parent.mkdir(parents=True)
    job._task = slurm.current_task()
    write_record(spec, 1, "stopped", 130)  # task 1 stopped its rank on the same warning
    t0 = time.time()
    assert job.checkpoint() is not None and read_state(spec)["state"] == "queued"
    assert time.time() - t0 < 2  # no wait: task 1's trainer has ended
    assert "requeues" not in read_state(spec) or not read_state(spec)["requeues"]  # a time limit: not counted
    write_record(spec, 1, "resume", 75)
    delayed = job.checkpoint()
    assert delayed.function.max_requeues == 1 and read_state(spec)["requeues"] == 1
    assert job.checkpoint() is None
    state = read_state(spec)
    assert (state["state"], state["failed_task"]) == ("failed", 1)
    assert "(--slurm_max_requeues=1): not again: the experiment failed" in log_path(spec).read_text()


def test_a_died_training_is_requeued_after_a_backoff_that_doubles_and_the_status_shows_it(tmp_path, monkeypatch,
                                                                                           capsys):
    """Exit code 1 (a learner or the coordinator died: sfx.train's "failed") in a one-task job: task 0 waits the
    backoff (the state says restarting, nothing requeued yet), then requeues; the next waits twice as long; once
    --slurm_max_requeues are spent the experiment fails in one line. Before, exit code 1 failed the experiment at
    once. --status and the waiting runner's RESTART line show each requeue."""
    from sfx_runner.status import experiment_status, format_status_table
    calls = stand_in_slurm_commands(tmp_path, monkeypatch)
    as_task(monkeypatch, 0, 1)
    monkeypatch.setenv("EXIT_CODE", "1")
    job, spec = _job(tmp_path, EXITS_WITH, max_requeues=2, restart_backoff_sec=0.6)
    seen = []

    def watch(stop: threading.Event) -> None:  # the state while task 0 sleeps its backoff
        while not stop.is_set():
            state = read_state(spec) or {}
            if state.get("state") == "restarting":
                seen.append((state["requeues"], calls.exists() and calls.read_text().count("requeue")))
            time.sleep(0.05)

    for restart, backoff in ((0, 0.6), (1, 1.2)):
        monkeypatch.setenv("SLURM_RESTART_COUNT", str(restart))
        stop = threading.Event()
        watcher = threading.Thread(target=watch, args=(stop,))
        watcher.start()
        t0 = time.monotonic()
        with pytest.raises(SystemExit) as exited:
            job()
        waited = time.monotonic() - t0
        stop.set()
        watcher.join()
        assert exited.value.code == 75 and waited >= backoff, (waited, backoff)
        assert seen and set(seen) == {(restart + 1, restart)}  # restarting, and requeued only after the backoff
        seen.clear()
        state = read_state(spec)
        assert (state["state"], state["returncode"], state["requeues"], state["restarts"]) == \
            ("queued", 1, restart + 1, restart + 1)
        assert state["last_restart"]["returncode"] == 1 and state["last_restart"]["backoff_sec"] == backoff
    assert calls.read_text() == "scontrol requeue 4242\n" * 2
    log = log_path(spec).read_text()
    assert ("the trainer of task 0 ended (exit code 1): requeueing the job (requeue 1 of at most 2) in 0.6 s; "
            "every task starts again and resumes from rank 0's checkpoint") in log
    assert "(requeue 2 of at most 2) in 1.2 s" in log
    row = experiment_status(spec)
    assert (row["state"], row["restarts"]) == ("queued", 2)
    assert "queued, 2 restarts" in format_status_table([row])
    slurm.SlurmBackend._say_restart(spec, read_state(spec), seen_counts := {spec.name: 0})
    slurm.SlurmBackend._say_restart(spec, read_state(spec), seen_counts)  # once per requeue
    assert capsys.readouterr().out == (f"[runner] RESTART {spec.name} (the trainer of task 0 ended (exit code 1)): "
                                       f"requeue 2 of 2 in 1.2 s, resuming from its last checkpoint\n")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    with pytest.raises(ExperimentFailed, match=re.escape("requeued 2 time(s) for died trainings already "
                                                         "(--slurm_max_requeues=2): not again")):
        job()
    assert calls.read_text().count("requeue") == 2 and read_state(spec)["state"] == "failed"


def test_a_job_cancelled_during_its_backoff_is_not_requeued(tmp_path, monkeypatch):
    """scancel (SIGTERM) while task 0 waits before a requeue: no requeue, the experiment is interrupted (the same
    command resumes it), and the job ends within a second, not after the backoff."""
    calls = stand_in_slurm_commands(tmp_path, monkeypatch)
    as_task(monkeypatch, 0, 1)
    monkeypatch.setenv("EXIT_CODE", "1")
    job, spec = _job(tmp_path, EXITS_WITH, restart_backoff_sec=30)
    threading.Thread(target=lambda: (wait_for(lambda: (read_state(spec) or {}).get("state") == "restarting", 30,
                                              "the backoff"), os.kill(os.getpid(), signal.SIGTERM)),
                     daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(SystemExit) as exited:
        job()
    assert exited.value.code == 128 + signal.SIGTERM and time.monotonic() - t0 < 15
    assert not calls.exists()
    assert (read_state(spec)["state"], read_state(spec)["requeues"]) == ("interrupted", 1)
    assert "SIGTERM during the backoff: not requeued (interrupted)" in log_path(spec).read_text()

# ============================================================================ slow: the real cluster

def _cannot_run_a_cluster() -> str | None:
    if sys.platform != "linux" or not Path("/etc/debian_version").exists():
        return "the local Slurm cluster (scripts/local_slurm/start.sh) needs Debian/Ubuntu"
    if os.geteuid() != 0:
        return "the local Slurm cluster (scripts/local_slurm/start.sh) needs root"
    return None


@pytest.fixture(scope="session")
def slurm_cluster():
    """Starts (or checks: it is idempotent) the single-node cluster; fails instead of skipping when
    SFX_REQUIRE_SLURM=1."""
    required = os.environ.get("SFX_REQUIRE_SLURM") == "1"
    give_up = pytest.fail if required else pytest.skip
    reason = _cannot_run_a_cluster()
    if reason:
        give_up(reason + ("" if required else " (SFX_REQUIRE_SLURM=1 turns this skip into a failure)"))
    try:
        proc = subprocess.run(["bash", str(START_SCRIPT)], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        give_up(f"{START_SCRIPT} did not finish within 600 s")
    if proc.returncode != 0:
        give_up(f"{START_SCRIPT} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return query_partitions()


def cli(args: list[str], cwd: Path, timeout: float = 240, **kw) -> subprocess.CompletedProcess:
    """``python -m sfx.runner.run`` as a user types it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.run([sys.executable, "-m", "sfx.runner.run", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, **kw)


def sacct(job: str, fields: str = "JobID,State,ExitCode") -> dict[str, list[str]]:
    """``{task id: [field values]}`` of a job array, retried while accounting lags behind."""
    for _ in range(20):
        out = subprocess.run(["sacct", "-n", "-P", "-X", "-j", job, f"--format={fields}"], capture_output=True,
                             text=True, check=True).stdout
        rows = {line.split("|")[0]: line.split("|")[1:] for line in out.splitlines() if line.strip()}
        if rows and not any(r[0] in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING") for r in rows.values()):
            return rows
        time.sleep(0.5)
    return rows


def squeue_ids() -> set[str]:
    out = subprocess.run(["squeue", "-h", "-r", "-o", "%i"], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def env_steps(spec) -> int:
    try:
        return json.loads((spec.exp_dir / "status.json").read_text())["env_steps"]
    except (OSError, ValueError, KeyError):
        return 0


def read_log(spec) -> str:
    path = log_path(spec)
    return path.read_text() if path.exists() else ""


def wait_for(predicate, timeout: float, what: str, interval: float = 0.25, spec=None):
    """``predicate()``'s first true value; fails after ``timeout`` s, or at once when ``spec``'s job
    is no longer queued (it ended: nothing more will happen), showing the experiment's log."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        job_id = (read_state(spec) or {}).get("job_id") if spec is not None else None
        if job_id and job_id not in squeue_ids():
            value = predicate()
            if value:
                return value
            raise AssertionError(f"the job ended while waiting for {what}; state {read_state(spec)}, log:\n"
                                 + "\n".join(read_log(spec).splitlines()[-30:]))
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}"
                         + (f"; log:\n{read_log(spec)[-3000:]}" if spec is not None else ""))


INTERRUPTED_RE = re.compile(r"training interrupted after \S+: ([\d,]+) env steps")
RESUMED_RE = re.compile(r"policy 0 resumed at train step \d+, (\d+) env steps")


def resumes_after_stops(log):
    """(env steps the attempt before stopped at, env steps the next resumed at), for each resume."""
    pairs = []
    for resumed in RESUMED_RE.finditer(log):
        stops = INTERRUPTED_RE.findall(log[:resumed.start()])
        pairs.append((int(stops[-1].replace(",", "")) if stops else -1, int(resumed.group(1))))
    return pairs


@pytest.mark.slow
def test_sweep_to_completion_with_a_failure_and_relaunch(slurm_cluster, tmp_path):
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("sweep", [
            Experiment("cp", {TINY_TRAIN + " --train_for_env_steps=12000"!r}, ParamGrid([("seed", [1, 2])])),
            Experiment("bad", {TINY_TRAIN.replace("gym_CartPole-v1", "gym_DoesNotExist-v0")!r}),
        ])
    """)
    train_dir = tmp_path / "td"
    proc = cli([f"--run={run_file}", f"--train_dir={train_dir}", *CPU_JOB, "--slurm_wait"], cwd=tmp_path)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    good, _, bad = specs = specs_of(run_file, train_dir)
    job_ids = [read_state(s)["job_id"] for s in specs]
    array_id = job_ids[0].split("_")[0]
    assert job_ids == [f"{array_id}_{i}" for i in range(3)]  # one job array for the run
    states = sacct(array_id)
    assert [states[j][0] for j in job_ids] == ["COMPLETED", "COMPLETED", "FAILED"]
    for spec in specs[:2]:
        assert (spec.exp_dir / "done").is_file() and env_steps(spec) >= 12000
        assert read_state(spec)["state"] == "finished"
        assert f"{spec.name}: finished (job {read_state(spec)['job_id']}: COMPLETED, 1 attempt(s))" in out
    assert read_state(bad)["state"] == "failed" and read_state(bad)["returncode"] == 2
    assert f"{bad.name}: FAILED (job {job_ids[2]}: Slurm state FAILED, exit code 2)" in out
    assert "gym_DoesNotExist-v0" in out  # the last lines of its log, in the report
    assert "[runner] slurm: 2/3 finished, 1 failed" in out
    scancel = train_dir / "sweep" / ".runner" / "scancel.sh"
    assert f"scancel \"$@\" {array_id}" in scancel.read_text()

    # relaunch: the finished experiments are skipped, the failed one is submitted again (alone)
    proc = cli([f"--run={run_file}", f"--train_dir={train_dir}", *CPU_JOB, "--slurm_wait"], cwd=tmp_path)
    assert proc.returncode == 1
    assert f"skipped (finished): {good.name}" in proc.stdout
    new_id = read_state(bad)["job_id"]
    assert new_id != job_ids[2] and "_" not in new_id  # a single job, not an array
    assert read_state(bad)["attempts"] == 2
    assert read_state(good)["job_id"] == job_ids[0]
    assert f"scancel \"$@\" {array_id} {new_id}" in scancel.read_text()


@pytest.mark.slow
def test_preempted_job_checkpoints_requeues_and_resumes(slurm_cluster, tmp_path):
    """SIGTERM + the warning signal (what a preempting cluster sends, and submitit's own test
    helper): the trainer saves a checkpoint, the job requeues itself and continues from it."""
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("preempt", [Experiment("cp", {TINY_TRAIN + " --train_for_env_steps=150000 --report_every_sec=1"!r})])
    """)
    train_dir = tmp_path / "td"
    (spec,) = specs_of(run_file, train_dir)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    launcher = subprocess.Popen([sys.executable, "-m", "sfx.runner.run", f"--run={run_file}",
                                 f"--train_dir={train_dir}", *CPU_JOB, "--slurm_wait", "--slurm_signal_delay_sec=30"],
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: env_steps(spec) >= 4000, 120, "the trainer to make progress", spec=spec)
        job_id = read_state(spec)["job_id"]
        subprocess.run(["scancel", "--signal=TERM", job_id], check=True)
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True)
        out, _ = launcher.communicate(timeout=180)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, out + read_log(spec)
    assert f"{spec.name}: finished (job {job_id}: COMPLETED, 2 attempt(s))" in out
    log = log_path(spec).read_text()
    stopped_at = int(INTERRUPTED_RE.search(log).group(1).replace(",", ""))
    resumed_at = int(RESUMED_RE.search(log).group(1))
    assert 0 < stopped_at == resumed_at < 150000  # the second attempt started from the checkpoint
    # Slurm's SIGTERM, or the job's SIGINT on the warning signal if that one reached the trainer first
    assert re.search(r"SIG(TERM|INT) received: stopping, saving a final checkpoint", log), log[-3000:]
    assert "warning signal, trainer stopped (exit code 130); the job is requeued" in log
    assert log.count("[runner] attempt ") == 2
    assert (spec.exp_dir / "done").is_file() and env_steps(spec) >= 150000
    state = read_state(spec)
    assert (state["state"], state["attempts"], state["restarts"], state["job_id"]) == ("finished", 2, 1, job_id)
    assert sacct(job_id)[job_id][0] == "COMPLETED"


@pytest.mark.slow
def test_time_limit_requeues_relaunch_skips_running_and_scancel_script(slurm_cluster, tmp_path):
    """A job at its time limit (1 min, the warning 50 s before) checkpoints and comes back; relaunching
    the run meanwhile submits nothing twice; scancel.sh cancels it.

    Slurm sends time-limit signals on its own clock, up to a minute off (sbatch(1) on --signal), so
    the warning may come at any moment of this job, even while the trainer starts: the test only
    needs one attempt to resume from the checkpoint the previous one saved."""
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("limit", [
            Experiment("cp", {TINY_TRAIN + " --train_for_env_steps=100000000"!r}),
        ])
    """)
    train_dir = tmp_path / "td"
    (spec,) = specs_of(run_file, train_dir)
    flags = [f"--run={run_file}", f"--train_dir={train_dir}", *CPU_JOB, "--slurm_timeout=1",
             "--slurm_signal_delay_sec=50"]
    proc = cli(flags, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # returns once submitted
    job_id = read_state(spec)["job_id"]
    runner_dir = train_dir / "limit" / ".runner"
    scancel = runner_dir / "scancel.sh"
    try:
        assert "1 min per job" in proc.stdout and str(scancel) in proc.stdout
        # an attempt the warning stops while its trainer starts saves 0 env steps and the next one
        # resumes at 0: wait for a resume after some progress; every resume starts where the
        # attempt before it stopped
        log = wait_for(lambda: any(r > 0 for _, r in resumes_after_stops(read_log(spec))) and read_log(spec),
                       320, "the job to be requeued and to resume after some progress", interval=1, spec=spec)
        pairs = resumes_after_stops(log)
        assert all(stopped == resumed for stopped, resumed in pairs), pairs  # each from the checkpoint
        assert "warning signal, trainer stopped (exit code 130); the job is requeued" in log
        submitit_log = "".join(p.read_text() for p in (runner_dir / "slurm").glob("*/*_log.out"))
        assert "this job is timed-out" in submitit_log  # Slurm's own time-limit warning, not a test signal
        state = read_state(spec)
        assert state["attempts"] >= 2 and state["restarts"] == state["attempts"] - 1

        relaunch = cli(flags, cwd=tmp_path)
        assert relaunch.returncode == 0
        assert f"{spec.name}: skipped (already queued or running as Slurm job {job_id})" in relaunch.stdout
        assert len((runner_dir / "slurm_jobs.txt").read_text().splitlines()) == 1
    finally:
        subprocess.run([str(scancel)], check=True)
    wait_for(lambda: job_id not in squeue_ids(), 60, "scancel.sh to end the job")
    assert sacct(job_id)[job_id][0].startswith("CANCELLED")  # "CANCELLED by <uid>"
    # cancelled while its trainer ran (the usual case; it may also sit in the queue between two
    # attempts): the trainer got SIGTERM from Slurm, saved a checkpoint, the state says interrupted
    state = wait_for(lambda: read_state(spec)["state"] in ("interrupted", "queued") and read_state(spec), 30,
                     "the runner state after the cancel")
    if state["state"] == "interrupted":
        assert "SIGTERM received: stopping, saving a final checkpoint" in read_log(spec)


@pytest.mark.slow
def test_gpus_template_env_and_exact_argv_on_the_node(slurm_cluster, tmp_path):
    (tmp_path / "rec.py").write_text(RECORDER)
    template = tmp_path / "site.sbatch"
    template.write_text("#SBATCH --mem=200M\n# comment\nexport TEMPLATE_MARK='from the template'\n")
    run_file = write_run(tmp_path, """
        RUN_DESCRIPTION = RunDescription("gpus", [
            Experiment("rec", "python rec.py --note='a b \\"c\\" $d'", ParamList([{"seed": 1}, {"seed": 2}]),
                       env_vars={"EXTRA": "x y"}),
        ])
    """)
    train_dir = tmp_path / "td"
    proc = cli([f"--run={run_file}", f"--train_dir={train_dir}", "--runner=slurm", "--slurm_gpus_per_job=1",
                "--slurm_cpus_per_gpu=1", f"--slurm_sbatch_template={template}", "--slurm_wait"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for spec in specs_of(run_file, train_dir):
        rec = json.loads((spec.train_dir / f"{spec.name}.rec.json").read_text())
        assert rec["argv"] == spec.argv[2:]
        assert '--note=a b "c" $d' in rec["argv"]
        assert rec["env"]["CUDA_VISIBLE_DEVICES"] in ("0", "1")  # one of the node's 2 (fake) GPUs per job
        assert rec["env"]["TEMPLATE_MARK"] == "from the template"
        assert rec["env"]["EXTRA"] == "x y"
        assert rec["cwd"] == str(tmp_path)  # where the runner was started
        # the experiment sees the submitting shell's PYTHONPATH, not the job script's addition
        assert rec["env"]["PYTHONPATH"] == str(REPO) and rec["env"]["SFX_RUNNER_CODE_ROOT"] is None
        job_id = read_state(spec)["job_id"]
        assert rec["env"]["SLURM_JOB_ID"] and sacct(job_id, "JobID,State,ReqMem")[job_id] == ["COMPLETED", "200M"]


@pytest.mark.slow
def test_bad_requests_fail_at_once_and_submit_nothing(slurm_cluster, tmp_path):
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("failfast", [Experiment("cp", {TINY_TRAIN!r})])
    """)
    nodes = [n for p in slurm_cluster.values() for n in p.nodes]
    max_cpus = max(n.cpus for n in nodes)
    max_gpus = max(n.gpus for n in nodes)
    huge_mem = tmp_path / "mem.sbatch"
    huge_mem.write_text("#SBATCH --mem=100000G\n")
    cases = [
        (["--slurm_partition=nosuch"], "--slurm_partition='nosuch': no such partition; partitions: debug (default)"),
        (["--slurm_cpus_per_gpu=" + str(max_cpus + 1)], f"has no node with {max_cpus + 1} CPUs and 0 GPUs per job"),
        (["--slurm_gpus_per_job=1", "--slurm_cpus_per_gpu=1000"], "has no node with 1000 CPUs and 1 GPUs"),
        (["--slurm_timeout=1", "--slurm_signal_delay_sec=60"], "--slurm_signal_delay_sec=60 is not below"),
        ([f"--slurm_sbatch_template={huge_mem}"], "sbatch refused the job array of run 'failfast'"),
    ]
    before = squeue_ids()
    for flags, message in cases:
        t0 = time.time()
        proc = cli([f"--run={run_file}", f"--train_dir={tmp_path / 'td'}", *CPU_JOB, *flags], cwd=tmp_path)
        assert proc.returncode == 2, (flags, proc.stdout, proc.stderr)
        assert message in proc.stderr, proc.stderr
        assert time.time() - t0 < 30
    too_many_gpus = cli([f"--run={run_file}", f"--train_dir={tmp_path / 'td'}", "--runner=slurm",
                         f"--slurm_gpus_per_job={max_gpus + 1}", "--slurm_cpus_per_gpu=1"], cwd=tmp_path)
    assert too_many_gpus.returncode == 2
    assert f"GPUs per job (--slurm_gpus_per_job={max_gpus + 1}" in too_many_gpus.stderr
    assert squeue_ids() == before
    assert not list((tmp_path / "td").glob("failfast/.runner/*.json"))  # no experiment recorded as queued


@pytest.mark.slow
def test_one_training_as_two_srun_tasks_on_the_cluster(slurm_cluster, tmp_path):
    """Issue 15's Slurm case: srun's tasks are the ranks (SLURM_PROCID / SLURM_STEP_ID ...; rendezvous at
    the step's first host on a port from the job id); the run finishes with rank 0's checkpoint."""
    cmd = ["srun", "--ntasks=2", "--cpus-per-task=1", "--time=5", sys.executable, "-m", "sfx.train",
           "--env=gym_CartPole-v1", "--experiment=srun2", f"--train_dir={tmp_path}", "--num_workers=1",
           "--num_envs_per_worker=8", "--train_for_env_steps=60000", "--device=cpu", "--hidden_size=64",
           "--use_rnn=False", "--batch_size=512", "--distributed_timeout_sec=60"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    exp = tmp_path / "srun2"
    logs = [(exp / "sf_log.txt").read_text(), (exp / "rank_1" / "sf_log.txt").read_text()]
    for r, text in enumerate(logs):
        assert f"rank {r} of 2 (local rank {r} of 2, launched by slurm" in text
        assert "with equal weights" in text
    assert list((exp / "checkpoint_p0").glob("checkpoint_*.pth"))
    assert (exp / "done").read_text().startswith("env_steps=")


# one training as 2 ranks (async mode: serial mode runs one rank only), CPU, small
RANKS_TRAIN = ("python -m sfx.train --env=gym_CartPole-v1 --num_workers=1 --num_envs_per_worker=8 --device=cpu "
               "--hidden_size=64 --use_rnn=False --batch_size=512 --distributed_timeout_sec=60")
TWO_TASKS = ["--runner=slurm", "--slurm_nodes=1", "--slurm_tasks_per_node=2", "--slurm_gpus_per_job=0",
             "--slurm_cpus_per_gpu=1"]


@pytest.mark.slow
def test_one_training_as_two_tasks_through_the_runner(slurm_cluster, tmp_path):
    """--slurm_tasks_per_node=2: one job of 2 tasks per experiment, each task one rank of one training."""
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("ranks", [Experiment("cp", {RANKS_TRAIN + " --train_for_env_steps=40000"!r})])
    """)
    train_dir = tmp_path / "td"
    (spec,) = specs_of(run_file, train_dir)
    proc = cli([f"--run={run_file}", f"--train_dir={train_dir}", *TWO_TASKS, "--slurm_wait"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr + read_log(spec)[-3000:]
    job_id = read_state(spec)["job_id"]
    assert f"{spec.name}: finished (job {job_id}: COMPLETED, 1 attempt(s))" in proc.stdout
    assert "[runner] each job: 2 tasks per experiment (1 node(s) x 2), --kill-on-bad-exit=1" in proc.stdout
    exp = spec.exp_dir
    # rank 0 owns the experiment: cfg, checkpoints, done; rank 1 its own log folder only
    assert (exp / "cfg.json").is_file() and list((exp / "checkpoint_p0").glob("checkpoint_*.pth"))
    assert not (exp / "rank_1" / "checkpoint_p0").exists() or not list((exp / "rank_1" / "checkpoint_p0").iterdir())
    for rank, folder in ((0, exp), (1, exp / "rank_1")):
        assert f"rank {rank} of 2 (local rank {rank} of 2, launched by slurm" in (folder / "sf_log.txt").read_text()
    total = int((exp / "done").read_text().split("=")[1])
    assert total >= 40000 and env_steps(spec) == total
    # the env steps are every rank's together: both ranks stopped at that sum, and each rank's own
    # frame rate is below the one of all ranks together
    for folder in (exp, exp / "rank_1"):
        status = json.loads((folder / "status.json").read_text())
        assert (status["env_steps"], status["world_size"], status["status"]) == (total, 2, "done")
        assert 0 < status["fps_this_rank"] < status["fps"]
        assert f"agreed to stop at {total:,} env steps (all ranks)" in (folder / "sf_log.txt").read_text()
    state = read_state(spec)
    assert (state["state"], state["tasks"], state["attempts"], state["requeues"]) == ("finished", 2, 1, 0)
    records = slurm.read_task_records(spec)
    assert sorted(records) == [0, 1] and {r["outcome"] for r in records.values()} == {"finished"}
    assert records[0]["attempt"] == records[1]["attempt"] == f"{job_id}:0"
    assert read_log(spec).startswith(f"[runner] attempt 1: slurm job {job_id} task 0 of 2 on ")
    task1_log = slurm.task_log_path(spec, 1).read_text()
    assert task1_log.startswith(f"[runner] slurm job {job_id} task 1 of 2 (restart 0) on ")
    assert sacct(job_id)[job_id][0] == "COMPLETED"


REQUEUE_RE = re.compile(r"\[runner\] slurm job (\S+): the trainer of task (\d) ended \(([^)]*)\): requeueing the job "
                        r"\(requeue 1 of at most 3\)")
CHECKPOINT_STEPS_RE = re.compile(r"checkpoint_\d+_(\d+)\.pth$")


def checkpoint_env_steps(spec) -> list[int]:
    return sorted(int(m.group(1)) for p in (spec.exp_dir / "checkpoint_p0").glob("checkpoint_*.pth")
                  if (m := CHECKPOINT_STEPS_RE.search(p.name)))


@pytest.mark.slow
def test_a_lost_rank_requeues_the_job_which_resumes_from_rank_0s_checkpoint(slurm_cluster, tmp_path):
    """Rank 1's trainer (and its workers) killed mid-training: rank 0 notices and stops, task 0 requeues
    the job once, both tasks start again, rank 0 resumes from its last checkpoint, the training finishes."""
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("lost", [
            Experiment("cp", {RANKS_TRAIN + " --train_for_env_steps=120000 --save_every_sec=3"!r}),
        ])
    """)
    train_dir = tmp_path / "td"
    (spec,) = specs_of(run_file, train_dir)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    launcher = subprocess.Popen([sys.executable, "-m", "sfx.runner.run", f"--run={run_file}",
                                 f"--train_dir={train_dir}", *TWO_TASKS, "--slurm_wait"],
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: checkpoint_env_steps(spec) and env_steps(spec) >= 20000, 150,
                 "a checkpoint and some progress", spec=spec)
        record = slurm.read_task_records(spec)[1]
        assert record["outcome"] == "running"
        os.killpg(record["pid"], signal.SIGKILL)  # rank 1's trainer leads its own process group
        log = wait_for(lambda: REQUEUE_RE.search(read_log(spec)) and read_log(spec), 150,
                       "task 0 to requeue the job", spec=spec)
        last_checkpoint = checkpoint_env_steps(spec)[-1]  # the requeued job starts >= 10 s later
        out, _ = launcher.communicate(timeout=240)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, out + read_log(spec)[-3000:]
    job_id = read_state(spec)["job_id"]
    assert f"{spec.name}: finished (job {job_id}: COMPLETED, 2 attempt(s))" in out
    # who saw the loss first: rank 0 (exit code 75) or task 1's record (killed) when rank 0's own exit came
    # as an error
    requeue = REQUEUE_RE.search(log)
    assert requeue.group(1) == job_id
    assert (requeue.group(2), requeue.group(3)) in {("0", "exit code 75: another rank died or hung"),
                                                    ("1", "killed by SIGKILL")}, log[-3000:]
    task1_log = slurm.task_log_path(spec, 1).read_text()
    assert "task 1 of 2: the trainer ended (killed by SIGKILL); waiting up to 640 s for task 0 to requeue" in task1_log
    assert task1_log.count("[runner] slurm job") >= 2 and "task 1 of 2 (restart 1)" in task1_log
    # the second attempt resumed from the checkpoint rank 0 had when the job was requeued
    full_log = read_log(spec)
    resumed = RESUMED_RE.search(full_log, requeue.end())
    assert resumed and int(resumed.group(1)) == last_checkpoint > 0, full_log[-3000:]
    assert full_log.count("[runner] attempt ") == 2
    total = int((spec.exp_dir / "done").read_text().split("=")[1])
    assert total >= 120000
    state = read_state(spec)
    assert (state["state"], state["attempts"], state["requeues"], state["restarts"]) == ("finished", 2, 1, 1)
    records = slurm.read_task_records(spec)
    assert [(r["outcome"], r["attempt"]) for _, r in sorted(records.items())] == [("finished", f"{job_id}:1")] * 2
    assert sacct(job_id)[job_id][0] == "COMPLETED"


@pytest.mark.extended  # in ./all_tests.sh only with SFX_EXTENDED=1 (pytest.ini says why)
@pytest.mark.slow
def test_warning_signal_stops_every_rank_and_requeues_the_two_task_job(slurm_cluster, tmp_path):
    """The warning signal (time limit, preemption) on a 2-task job, reaching task 1 first (Slurm signals
    the tasks one by one; a CI run saw task 0's come after its trainer had ended): task 1 stops rank 1 with
    SIGINT, the ranks agree to stop, every rank ends interrupted (rank 0, whose own rules never fired, used to
    end "done" and mark the unfinished experiment finished), rank 0 saves the checkpoint; task 0 waits for
    its own signal, on which submitit's handler requeues the job (not counted as a lost rank); both ranks
    resume from the checkpoint and finish."""
    import psutil

    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("warn", [Experiment("cp", {RANKS_TRAIN + " --train_for_env_steps=120000 --report_every_sec=1"!r})])
    """)
    train_dir = tmp_path / "td"
    (spec,) = specs_of(run_file, train_dir)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    launcher = subprocess.Popen([sys.executable, "-m", "sfx.runner.run", f"--run={run_file}",
                                 f"--train_dir={train_dir}", *TWO_TASKS, "--slurm_wait", "--slurm_signal_delay_sec=60"],
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # status.json every second (--report_every_sec=1): with the default 5 s the first progress seen was
        # 50k of the 120k env steps here
        wait_for(lambda: env_steps(spec) >= 10000, 150, "the ranks to make progress", spec=spec)
        job_id = read_state(spec)["job_id"]
        # task 1 (the parent of rank 1's trainer) first, then, once rank 0 has ended, the whole job
        os.kill(psutil.Process(slurm.read_task_records(spec)[1]["pid"]).ppid(), signal.SIGUSR2)
        wait_for(lambda: "the trainer ended at another rank's stop (exit code 130)" in read_log(spec), 60,
                 "rank 0 to end at rank 1's stop", spec=spec)
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True)
        out, _ = launcher.communicate(timeout=240)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, out + read_log(spec)[-3000:]
    assert f"{spec.name}: finished (job {job_id}: COMPLETED, 2 attempt(s))" in out, out + read_log(spec)[-3000:]
    log = read_log(spec)
    assert "warning signal, trainer stopped (exit code 130); the job is requeued and resumes" in log
    stopped_at = int(INTERRUPTED_RE.search(log).group(1).replace(",", ""))
    assert 0 < stopped_at == int(RESUMED_RE.search(log).group(1)) < 120000
    assert (f"every rank's learner agreed to stop at {stopped_at:,} env steps (all ranks) with equal weights, as "
            f"another rank's stop wanted (interrupted)") in log
    rank1_log = (spec.exp_dir / "rank_1" / "sf_log.txt").read_text()
    assert "SIGINT received: stopping" in rank1_log
    assert "task 1 of 2: warning signal, trainer stopped" in slurm.task_log_path(spec, 1).read_text()
    state = read_state(spec)
    assert (state["state"], state["attempts"], state["requeues"], state["restarts"]) == ("finished", 2, 0, 1)
    assert int((spec.exp_dir / "done").read_text().split("=")[1]) >= 120000


@pytest.mark.slow
def test_a_real_error_on_task_1_ends_the_job_at_once_without_requeue(slurm_cluster, tmp_path):
    """Task 1's command fails (exit code 2, as for bad flags) while task 0's runs on: srun
    --kill-on-bad-exit ends task 0 within seconds, the experiment fails naming task 1, no requeue."""
    (tmp_path / "rank.py").write_text(textwrap.dedent("""
        import os, signal, sys, time
        if os.environ["SLURM_PROCID"] == "1":
            print("sfx: error: --bad_flag is not a flag", flush=True)
            sys.exit(2)
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(130))
        time.sleep(300)
    """))
    run_file = write_run(tmp_path, """
        RUN_DESCRIPTION = RunDescription("bad1", [Experiment("cp", "python rank.py")])
    """)
    train_dir = tmp_path / "td"
    (spec,) = specs_of(run_file, train_dir)
    t0 = time.time()
    proc = cli([f"--run={run_file}", f"--train_dir={train_dir}", *TWO_TASKS, "--slurm_wait"], cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert time.time() - t0 < 120  # not the 300 s task 0's command would sleep
    state = read_state(spec)
    assert (state["state"], state["failed_task"], state["returncode"], state["requeues"]) == ("failed", 1, 2, 0)
    assert state["message"].startswith("the trainer of task 1 failed (exit code 2; see ")
    assert f"{spec.name}: FAILED (job {state['job_id']}: Slurm state FAILED, exit code 2; the trainer of task 1" \
        in proc.stdout
    assert "sfx: error: --bad_flag is not a flag" in proc.stdout  # the last lines of task 1's log
    records = slurm.read_task_records(spec)
    assert (records[0]["outcome"], records[1]["outcome"]) == ("stopped", "failed")
    assert "SIGTERM (cancelled, preempted or at the time limit), trainer stopped (exit code 130)" in read_log(spec)


# the learner in a process of its own (serial mode has none to kill)
ASYNC_TRAIN = ("python -m sfx.train --env=gym_CartPole-v1 --num_workers=1 --num_envs_per_worker=8 --device=cpu "
               "--hidden_size=64 --use_rnn=False --batch_size=512 --set_workers_cpu_affinity=False --seed=1")
RESTART_RE = re.compile(r"\[runner\] RESTART \S*cp \(the trainer of task 0 ended \(exit code 1\)\): requeue 1 of 3 "
                        r"in 2 s, resuming from its last checkpoint")


@pytest.mark.slow
def test_a_killed_learner_requeues_the_job_after_its_backoff_and_resumes(slurm_cluster, tmp_path):
    """Issue 56 on Slurm: kill -9 of the learner of a one-task job. The training stops with exit code 1 (its last
    checkpoint kept); task 0 waits --slurm_restart_backoff_sec, requeues the job, the requeued job resumes from
    the newest checkpoint there was (no env step lost beyond it, none counted twice) and finishes; the waiting
    runner prints the RESTART, --status shows it. Before, exit code 1 failed the experiment for good."""
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("learner", [
            Experiment("cp", {ASYNC_TRAIN + " --train_for_env_steps=100000 --save_every_sec=2"!r}),
        ])
    """)
    train_dir = tmp_path / "td"
    (spec,) = specs_of(run_file, train_dir)
    ckpt_dir = spec.exp_dir / "checkpoint_p0"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    flags = [f"--run={run_file}", f"--train_dir={train_dir}", *CPU_JOB]
    launcher = subprocess.Popen([sys.executable, "-m", "sfx.runner.run", *flags, "--slurm_wait",
                                 "--slurm_restart_backoff_sec=2"],
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: len(checkpoint_env_steps(spec)) >= 2, 180, "two checkpoints", spec=spec)
        learner = json.loads((spec.exp_dir / "status.json").read_text())["components"]["learner_0"]
        os.kill(learner, signal.SIGKILL)
        newest = checkpoint_env_steps(spec)[-1]  # the coordinator's stop saves no other: the learner is gone
        state = wait_for(lambda: (read_state(spec) or {}).get("state") == "restarting" and read_state(spec), 60,
                         "the backoff", interval=0.1, spec=spec)
        assert (state["requeues"], state["last_restart"]["returncode"], state["last_restart"]["backoff_sec"]) == \
            (1, 1, 2)
        out, _ = launcher.communicate(timeout=300)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, out + read_log(spec)[-3000:]
    job_id = read_state(spec)["job_id"]
    assert RESTART_RE.search(out), out
    assert f"{spec.name}: finished (job {job_id}: COMPLETED, 2 attempt(s))" in out, out
    log = read_log(spec)
    assert "stopping: learner_0 died (exit code -9); its last checkpoint is kept" in log, log[-3000:]
    assert "requeueing the job (requeue 1 of at most 3) in 2 s" in log
    resumed = [int(m) for m in RESUMED_RE.findall(log)]
    assert resumed and resumed[-1] >= newest, (resumed, newest)
    assert log.count("[runner] attempt ") == 2
    state = read_state(spec)
    assert (state["state"], state["attempts"], state["requeues"], state["restarts"]) == ("finished", 2, 1, 1)
    assert 100_000 <= int((spec.exp_dir / "done").read_text().split("=")[1]) <= 100_000 + 8 * 512
    status = cli([*flags, "--status"], cwd=tmp_path)
    assert "finished, 1 restart" in status.stdout, status.stdout
