"""The slurm backend.

Fast tests: flag and template parsing, the fail-fast checks against made-up partitions, ``sinfo``
parsing (a stand-in ``sinfo``), the dry run and the job callable run outside Slurm.

Slow tests: against a REAL single-node Slurm cluster on this machine (scripts/local_slurm/start.sh,
root on Debian): a sweep to completion with a failing experiment, a job preempted (SIGTERM + the
warning signal) that checkpoints, requeues and resumes, a job that reaches its time limit and
resumes, GPUs / template / exact argv on the node, the fail-fast errors, relaunch and scancel.sh.
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
                                                          "SFX_RUNNER_CODE_ROOT")}}, f)
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
    assert f"task 0: 00_cp_see=1: {sys.executable} -m sfx.train" in out
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
    monkeypatch.setenv("EXIT_CODE", "3")
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    job, spec = _job(tmp_path, RECORDER)
    with pytest.raises(ExperimentFailed, match=rf"experiment {spec.name} exited with code 3; last lines"):
        job()
    state = read_state(spec)
    assert (state["state"], state["returncode"]) == ("failed", 3)


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
        RUN_DESCRIPTION = RunDescription("preempt", [Experiment("cp", {TINY_TRAIN + " --train_for_env_steps=150000"!r})])
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
        log = wait_for(lambda: RESUMED_RE.search(read_log(spec)) and read_log(spec), 200,
                       "the job to be requeued and to resume", interval=1, spec=spec)
        resumed = RESUMED_RE.search(log)
        stops = INTERRUPTED_RE.findall(log[:resumed.start()])
        assert stops and int(stops[-1].replace(",", "")) == int(resumed.group(1)) > 0  # from the checkpoint
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
