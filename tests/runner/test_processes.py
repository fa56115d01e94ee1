"""The processes backend, through the real command line: real CartPole trainings, a failing one,
relaunch, GPU assignment (fake nvidia-smi), exact argv, Ctrl+C, resume after an interrupt."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sfx_runner.cli import load_run_description
from sfx_runner.state import pid_alive, read_state, write_state

REPO = Path(__file__).resolve().parents[2]

# 64 units: the width these jobs were timed with before the gym family's default became 512
TINY_TRAIN = ("python -m sfx.train --env=gym_CartPole-v1 --num_workers=1 --num_envs_per_worker=4 "
              "--serial_mode=True --device=cpu --hidden_size=64")

# a stand-in experiment: records its argv, environment and start/end times next to its folder
RECORDER = textwrap.dedent("""
    import glob, json, os, sys, time
    args = dict(a.split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
    start = time.time()
    peers = int(os.environ.get("PEERS", "0"))
    if peers:
        # stay until PEERS experiments of this run are running at once (or SLEEP_SEC passed): the overlap
        # the runner allows shows however slowly a loaded machine starts processes
        running = os.path.join(args["--train_dir"], args["--experiment"] + ".running")
        open(running, "w").close()
        deadline = start + float(os.environ.get("SLEEP_SEC", "0"))
        while time.time() < deadline and len(glob.glob(os.path.join(args["--train_dir"], "*.running"))) < peers:
            time.sleep(0.02)
        time.sleep(0.2)  # the others see the last arrival too before anyone leaves
        os.remove(running)
    else:
        time.sleep(float(os.environ.get("SLEEP_SEC", "0")))
    out = os.path.join(args["--train_dir"], args["--experiment"] + ".rec.json")
    with open(out, "w") as f:
        json.dump({"argv": sys.argv[1:], "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                   "extra": os.environ.get("EXTRA"), "start": start, "end": time.time()}, f)
    sys.exit(int(os.environ.get("EXIT_CODE", "0")))
""")


def write_run(tmp_path: Path, body: str, name: str = "run_mod") -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("from sfx_runner import Experiment, ParamGrid, ParamList, RunDescription\n"
                    + textwrap.dedent(body))
    return path


def runner(args, tmp_path, env=None, timeout=120, **kwargs):
    """``python -m sfx.runner.run`` as a user types it (in the repository, like the README says)."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO)}
    full_env.pop("CUDA_VISIBLE_DEVICES", None)  # each test decides which GPUs the runner sees
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "sfx.runner.run", f"--train_dir={tmp_path / 'td'}", *args],
                          cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout, **kwargs)


def specs_of(run_file: Path, tmp_path: Path):
    return load_run_description(str(run_file)).generate_experiments(tmp_path / "td")


def test_sweep_reports_a_failure_and_relaunch_skips_finished(tmp_path):
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("sweep", [
            Experiment("cartpole", "{TINY_TRAIN} --train_for_env_steps=3000", ParamGrid([("seed", [1, 2])])),
            Experiment("broken", "python -m sfx.train --env=gym_DoesNotExist-v0 --num_workers=1"),
        ])
    """)
    specs = specs_of(run_file, tmp_path)
    proc = runner([f"--run={run_file}", "--max_parallel=3", "--pause_between=0"], tmp_path)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    # the failure: name, exit code, the last lines of its log (the trainer's one-line error)
    failure = re.search(r"FAILED 02_broken \(exit code 2\).*\n((?:    \|.*\n)+)", out)
    assert failure, out
    assert "gym_DoesNotExist-v0" in failure.group(1)
    assert "[runner] done: 2/3 finished, 0 running, 1 failed, 0 queued" in out
    assert re.search(r"\[runner\] 0/3 finished, 3 running, 0 failed, 0 queued", out), "progress lines"
    for spec in specs[:2]:
        assert (spec.exp_dir / "done").is_file(), out
        status = json.loads((spec.exp_dir / "status.json").read_text())
        assert status["status"] == "done" and status["env_steps"] >= 3000
        state = read_state(spec)
        assert state["state"] == "finished" and state["returncode"] == 0 and state["attempts"] == 1
        assert state["backend"] == "processes" and not pid_alive(state["pid"])
        log = Path(state["log"]).read_text()
        assert log.startswith(f"===== [runner] {spec.name}: attempt 1") and "training done" in log
    bad = read_state(specs[2])
    assert bad["state"] == "failed" and bad["returncode"] == 2

    proc = runner([f"--run={run_file}", "--status", "--json"], tmp_path)
    rows = json.loads(proc.stdout)
    assert [r["state"] for r in rows] == ["finished", "finished", "failed"]
    assert all(r["env_steps"] >= 3000 and r["train_for_env_steps"] == 3000 for r in rows[:2])
    assert all(isinstance(r["reward"][0], float) for r in rows[:2]) and rows[2]["returncode"] == 2
    assert [r["folder"] for r in rows] == [str(s.exp_dir) for s in specs]

    # relaunch: finished experiments are skipped, the failed one runs again and logs a second attempt
    proc = runner([f"--run={run_file}", "--max_parallel=3", "--pause_between=0"], tmp_path)
    assert proc.returncode == 1
    assert "skipped (finished): 00_cartpole_see=1" in proc.stdout
    assert "skipped (finished): 01_cartpole_see=2" in proc.stdout
    assert "started 00_" not in proc.stdout and "started 02_broken" in proc.stdout
    assert read_state(specs[2])["attempts"] == 2
    log = Path(read_state(specs[2])["log"]).read_text()
    assert "attempt 1" in log and "attempt 2" in log and log.count("gymnasium has no env") == 2


def test_argv_with_odd_characters_reaches_the_child_exactly(tmp_path):
    (tmp_path / "rec.py").write_text(RECORDER)
    odd = 'a b "c" $d \'e\' `f` \\g'
    cmd = f"python {tmp_path / 'rec.py'} --msg='it'\"'\"'s \"here\"'"  # the shell's way to quote it's "here"
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("odd", [
            Experiment("rec", {cmd!r},
                       ParamList([{{"note": {odd!r}}}, {{"note": "plain", "lr": 1e-4}}]),
                       env_vars={{"EXTRA": "x y $z"}}),
        ])
    """)
    specs = specs_of(run_file, tmp_path)
    proc = runner([f"--run={run_file}", "--pause_between=0"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for spec in specs:
        rec = json.loads((spec.train_dir / f"{spec.name}.rec.json").read_text())
        assert spec.argv[:2] == ["python", str(tmp_path / "rec.py")]
        assert rec["argv"] == spec.argv[2:]
        assert rec["extra"] == "x y $z"
    first = json.loads((specs[0].train_dir / f"{specs[0].name}.rec.json").read_text())
    assert f"--note={odd}" in first["argv"] and "--msg=it's \"here\"" in first["argv"]


def _gpu_run(tmp_path, n, sleep_sec):
    (tmp_path / "rec.py").write_text(RECORDER)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir(exist_ok=True)
    smi = fake_bin / "nvidia-smi"
    smi.write_text("#!/bin/sh\n[ \"$1\" = -L ] || exit 9\n"
                   "echo 'GPU 0: Fake GPU (UUID: GPU-0000)'\necho 'GPU 1: Fake GPU (UUID: GPU-1111)'\n")
    smi.chmod(0o755)
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("gpus", [
            Experiment("rec", "python {tmp_path / 'rec.py'}", ParamGrid([("seed", list(range({n})))]),
                       env_vars={{"SLEEP_SEC": "{sleep_sec}"}}),
        ])
    """)
    env = {"PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}"}
    return run_file, env


def _records(specs):
    return [json.loads((s.train_dir / f"{s.name}.rec.json").read_text()) for s in specs]


def _max_overlap(records):
    events = sorted([(r["start"], 1) for r in records] + [(r["end"], -1) for r in records])
    peak = current = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


def test_gpus_are_assigned_round_robin_with_experiments_per_gpu(tmp_path):
    # each experiment waits (up to 30 s) for as many others to run beside it as the runner should allow
    run_file, env = _gpu_run(tmp_path, 4, sleep_sec=30.0)
    specs = specs_of(run_file, tmp_path)
    proc = runner([f"--run={run_file}", "--max_parallel=4", "--pause_between=0", "--experiments_per_gpu=1"],
                  tmp_path, env={**env, "PEERS": "2"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "at most 2 at once (--max_parallel=4 capped by 2 GPUs x 1)" in proc.stdout
    records = _records(specs)
    assert sorted(r["cuda"] for r in records) == ["0", "0", "1", "1"]
    for gpu in "01":
        assert _max_overlap([r for r in records if r["cuda"] == gpu]) == 1, "one experiment per GPU at a time"
    assert _max_overlap(records) == 2

    # two per GPU: all four at once, two on each
    for spec in specs:
        (spec.train_dir / f"{spec.name}.rec.json").unlink()
    proc = runner([f"--run={run_file}", "--max_parallel=8", "--pause_between=0", "--experiments_per_gpu=2"],
                  tmp_path, env={**env, "PEERS": "4"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = _records(specs)
    assert sorted(r["cuda"] for r in records) == ["0", "0", "1", "1"]
    assert _max_overlap(records) == 4


def test_gpu_flags_without_gpus_and_with_visible_devices(tmp_path):
    run_file, fast = _gpu_run(tmp_path, 2, sleep_sec=0)
    specs = specs_of(run_file, tmp_path)

    # --num_gpus=0: CUDA_VISIBLE_DEVICES is left alone (unset here), not forced to ""
    proc = runner([f"--run={run_file}", "--pause_between=0", "--num_gpus=0", "--max_parallel=2"], tmp_path, env=fast)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["cuda"] for r in _records(specs)] == [None, None]

    # the runner's own CUDA_VISIBLE_DEVICES is the set of GPUs to hand out
    proc = runner([f"--run={run_file}", "--pause_between=0", "--max_parallel=2"], tmp_path,
                  env={**fast, "CUDA_VISIBLE_DEVICES": "5,7"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(r["cuda"] for r in _records(specs)) == ["5", "7"]

    # more GPUs than exist: refused before anything starts
    proc = runner([f"--run={run_file}", "--num_gpus=3"], tmp_path, env=fast)
    assert proc.returncode == 2 and "--num_gpus=3, but nvidia-smi -L lists 2 GPU(s)" in proc.stderr


def test_a_command_that_cannot_start_fails_alone(tmp_path):
    (tmp_path / "rec.py").write_text(RECORDER)
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("nostart", [
            Experiment("missing", "no_such_program_sfx_test --x=1"),
            Experiment("crash", "python {tmp_path / 'rec.py'}", env_vars={{"EXIT_CODE": "3"}}),
            Experiment("oom", "python -c 'import os; print(\\"allocating\\", flush=True); os.kill(os.getpid(), 9)'"),
            Experiment("ok", "python {tmp_path / 'rec.py'}"),
        ])
    """)
    # each failure as it is reported, not after three restarts each (--experiment_restarts has its own tests)
    proc = runner([f"--run={run_file}", "--pause_between=0", "--experiment_restarts=0"], tmp_path)
    assert proc.returncode == 1
    assert "FAILED 00_missing: could not start 'no_such_program_sfx_test'" in proc.stdout
    assert "FAILED 01_crash (exit code 3)" in proc.stdout and "    (no output)" in proc.stdout
    # killed from outside (the out-of-memory killer): a failure with its log, not an interruption
    assert re.search(r"FAILED 02_oom \(killed by SIGKILL\).*\n    \| allocating\n", proc.stdout), proc.stdout
    assert "finished 03_ok" in proc.stdout
    assert "[runner] done: 1/4 finished, 0 running, 3 failed, 0 queued" in proc.stdout
    spec = specs_of(run_file, tmp_path)[0]
    assert read_state(spec)["state"] == "failed" and read_state(spec)["returncode"] == 127


def test_dry_run_prints_commands_and_starts_nothing(tmp_path):
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("dry", [
            Experiment("cartpole", "{TINY_TRAIN}", ParamGrid([("seed", [1, 2])]), env_vars={{"A": "b c"}}),
        ])
    """)
    proc = runner([f"--run={run_file}", "--dry_run"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    for spec in specs_of(run_file, tmp_path):
        assert f"{spec.name}:\n    A='b c' {sys.executable} -m sfx.train" in proc.stdout
        assert f"--experiment={spec.name}" in proc.stdout
    assert not (tmp_path / "td").exists(), "a dry run writes nothing"


def test_an_experiment_still_running_from_an_earlier_launch_is_not_started_twice(tmp_path):
    """A runner killed and launched again finds the experiment's process still running: it is not started
    twice (two trainers on one folder), but watched; when it ends unfinished it is restarted, which the old
    runner would never have known."""
    (tmp_path / "rec.py").write_text(RECORDER)
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("twice", [Experiment("rec", "python {tmp_path / 'rec.py'}")])
    """)
    spec = specs_of(run_file, tmp_path)[0]
    # a process of an earlier runner (its command line names the experiment), still alive
    earlier = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--experiment={spec.name}"])
    try:
        write_state(spec, state="running", backend="processes", pid=earlier.pid, attempts=1)
        full_env = {**os.environ, "PYTHONPATH": str(REPO)}
        watcher = subprocess.Popen([sys.executable, "-m", "sfx.runner.run", f"--train_dir={tmp_path / 'td'}",
                                    f"--run={run_file}", "--restart_backoff_sec=0", "--num_gpus=0"], cwd=REPO,
                                   env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 60
        while read_state(spec).get("runner_pid") != watcher.pid and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        assert not (spec.train_dir / f"{spec.name}.rec.json").exists(), "started twice"
    finally:
        earlier.kill()
        earlier.wait()
    out, _ = watcher.communicate(timeout=120)
    assert f"{spec.name}: still running from an earlier launch (pid {earlier.pid}); not started again, watched" \
        in out
    assert f"RESTART {spec.name} (ended unfinished, started by an earlier runner: exit code unknown)" in out, out
    assert watcher.returncode == 0 and (spec.train_dir / f"{spec.name}.rec.json").exists(), out
    assert read_state(spec)["restarts"] == 1 and read_state(spec)["attempts"] == 2


# fails (EXIT_CODE) on its first FAILS attempts, then finishes as a trainer does (its done file)
FLAKY = textwrap.dedent("""
    import os, sys
    args = dict(a.split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
    exp = os.path.join(args["--train_dir"], args["--experiment"])
    os.makedirs(exp, exist_ok=True)
    counter = os.path.join(exp, "attempts")
    n = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
    open(counter, "w").write(str(n))
    if n <= int(os.environ["FAILS"]) and "--steady=1" not in sys.argv:
        print(f"attempt {n}: the learner died", flush=True)
        sys.exit(int(os.environ["EXIT_CODE"]))
    open(os.path.join(exp, "done"), "w").write("env_steps=1\\n")
""")


@pytest.mark.parametrize("fails, exit_code, restarts, outcome", [
    (2, 1, 3, "finished"),      # two deaths, restarted twice, finishes
    (1, -9, 3, "finished"),     # killed by a signal (SIGKILL): restarted
    (3, 1, 2, "failed"),        # the budget is spent: fails as before
    (1, 2, 3, "failed"),        # exit code 2 (bad flags): a restart would fail the same way
])
def test_an_experiment_whose_training_died_is_restarted_with_a_budget_and_backoff(tmp_path, fails, exit_code,
                                                                                  restarts, outcome):
    (tmp_path / "flaky.py").write_text(FLAKY.replace('sys.exit(int(os.environ["EXIT_CODE"]))',
                                                     'os.kill(os.getpid(), 9)' if exit_code == -9 else
                                                     'sys.exit(int(os.environ["EXIT_CODE"]))'))
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("flaky", [Experiment("f", "python {tmp_path / 'flaky.py'}"),
                                                   Experiment("steady", "python {tmp_path / 'flaky.py'} --steady=1")])
    """)
    specs = specs_of(run_file, tmp_path)
    t0 = time.time()
    proc = runner([f"--run={run_file}", f"--experiment_restarts={restarts}", "--restart_backoff_sec=0.5",
                   "--max_parallel=2", "--pause_between=0", "--num_gpus=0"], tmp_path,
                  env={"FAILS": str(fails), "EXIT_CODE": str(max(exit_code, 0))})
    out = proc.stdout
    expected_restarts = 0 if exit_code == 2 else min(fails, restarts)
    for k in range(1, expected_restarts + 1):
        backoff = 0.5 * 2 ** (k - 1)
        assert f"RESTART {specs[0].name} (" in out and f"restart {k} of {restarts} in {backoff:g} s, resuming from " \
            f"its last checkpoint" in out, out
    assert out.count("RESTART") == expected_restarts, out
    if expected_restarts:
        assert "its last line: attempt 1: the learner died" in out  # the cause, in the restart's line
        assert time.time() - t0 >= sum(0.5 * 2 ** k for k in range(expected_restarts))  # the backoff was waited
    state = read_state(specs[0])
    assert state["restarts"] == expected_restarts and state["attempts"] == expected_restarts + 1
    assert state["state"] == outcome, out
    assert read_state(specs[1])["restarts"] == 0 and read_state(specs[1])["state"] == "finished"  # the other goes on
    rows = json.loads(runner([f"--run={run_file}", "--status", "--json"], tmp_path).stdout)
    assert rows[0]["restarts"] == expected_restarts
    table = runner([f"--run={run_file}", "--status"], tmp_path).stdout
    if expected_restarts:
        assert f"{outcome}" in table and f"{expected_restarts} restart" in table, table
    if outcome == "failed" and exit_code != 2:
        assert f"not restarted again: its {restarts} restarts (--experiment_restarts) are spent" in out


def test_a_full_disk_does_not_end_the_runner(tmp_path):
    """The run's state files live in the train_dir: on a full disk their writes fail. The runner used to crash on
    it (and, crashing, leave its experiments unsupervised); now each failed write is one line and it goes on."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        run_file = write_run(tmp_path, """
            RUN_DESCRIPTION = RunDescription("full", [Experiment("sleeper", "python -c 'import time; time.sleep(4)'")])
        """)
        full_env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen([sys.executable, "-m", "sfx.runner.run", f"--train_dir={disk}", f"--run={run_file}",
                                 "--num_gpus=0"], cwd=REPO, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        spec = load_run_description(str(run_file)).generate_experiments(disk)[0]
        deadline = time.time() + 60
        while (read_state(spec) or {}).get("state") != "running" and time.time() < deadline:
            time.sleep(0.1)
        with open(disk / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
        out, err = proc.communicate(timeout=60)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
    assert proc.returncode == 0, out + err
    assert "Traceback" not in err, err
    assert "No space left on device): written again at the next change" in err, err
    assert "finished 00_sleeper" in out and "done: 1/1 finished" in out, out


def test_an_experiment_started_on_a_full_disk_is_reaped_without_crashing_the_runner(tmp_path):
    """Found by the 30-minute fault schedule: an experiment (re)started while the disk was full could not get its log
    header written; the header stayed in the log file's buffer, and closing the file as the experiment ended raised
    ENOSPC again: the runner crashed (a traceback out of _reap) and the sweep ended with a training unfinished."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        (disk / "full" / ".runner" / "logs").mkdir(parents=True)  # the folders exist, as on a restart
        with open(disk / "filler", "wb", buffering=0) as f:  # full to the last page
            for size in (65536, 4096, 1):
                try:
                    while True:
                        f.write(b"\0" * size)
                except OSError:
                    pass
        run_file = write_run(tmp_path, """
            RUN_DESCRIPTION = RunDescription("full", [Experiment("sleeper", "python -c 'import time; time.sleep(1)'")])
        """)
        proc = subprocess.run(
            [sys.executable, "-m", "sfx.runner.run", f"--train_dir={disk}", f"--run={run_file}", "--num_gpus=0"],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
    assert "could not write its log header" in proc.stdout, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0 and "finished 00_sleeper" in proc.stdout, proc.stdout + proc.stderr


# children for the Ctrl+C test: each starts a grandchild in its own process group, writes its pids
# and counts the SIGINTs it gets; "graceful" saves and exits 130, "stubborn" ignores SIGINT
STOPPABLE = textwrap.dedent("""
    import json, os, signal, subprocess, sys, time
    mode, out = sys.argv[1], sys.argv[2]
    grandchild = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN) if %r == 'stubborn' else None; "
        "time.sleep(120)" % mode])
    got = []
    def on_int(signum, frame):
        got.append(signum)
        with open(out + ".sigint", "a") as f:
            f.write("1")
        if mode == "graceful":
            time.sleep(0.3)  # "saving a checkpoint"
            with open(out + ".saved", "w") as f:
                f.write("saved")
            sys.exit(130)
    signal.signal(signal.SIGINT, on_int)
    with open(out + ".pids", "w") as f:
        json.dump([os.getpid(), grandchild.pid], f)
    while True:
        time.sleep(0.1)
""")


@pytest.mark.parametrize("how", ["timeout", "second_signal"])
def test_ctrl_c_stops_every_child_then_kills_the_stubborn(tmp_path, how):
    """``timeout``: a terminal Ctrl+C, the stubborn child is killed after --stop_timeout_sec.
    ``second_signal``: SIGTERM (e.g. from a job manager), then a Ctrl+C that kills at once."""
    script = tmp_path / "stoppable.py"
    script.write_text(STOPPABLE)
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("stop", [
            Experiment("graceful", "python {script} graceful {tmp_path / 'graceful'}"),
            Experiment("stubborn", "python {script} stubborn {tmp_path / 'stubborn'}"),
            Experiment("never", "python {script} graceful {tmp_path / 'never'}"),
        ])
    """)
    specs = specs_of(run_file, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    timeout_sec = 2 if how == "timeout" else 60
    # its own session, like a shell job: a "terminal Ctrl+C" is SIGINT to the runner's whole group
    proc = subprocess.Popen([sys.executable, "-m", "sfx.runner.run", f"--run={run_file}",
                             f"--train_dir={tmp_path / 'td'}", "--max_parallel=2", "--pause_between=0",
                             f"--stop_timeout_sec={timeout_sec}"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.time() + 30
        while not all((tmp_path / f"{m}.pids").exists() for m in ("graceful", "stubborn")):
            assert time.time() < deadline and proc.poll() is None, "children did not start"
            time.sleep(0.05)
        time.sleep(0.2)
        pids = [p for m in ("graceful", "stubborn") for p in json.loads((tmp_path / f"{m}.pids").read_text())]
        t0 = time.time()
        if how == "timeout":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
            while not (tmp_path / "graceful.saved").exists():
                assert time.time() - t0 < 20, "the graceful child did not get its SIGINT"
                time.sleep(0.05)
            time.sleep(0.5)
            os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out
    assert time.time() - t0 < 10, "killed well before the 60 s stop timeout"
    first = "SIGINT" if how == "timeout" else "SIGTERM"
    assert f"{first} received: stopping 2 experiment(s)" in out
    assert "killing 1 experiment(s) that did not stop: 01_stubborn" in out
    # one SIGINT each, from the runner (the terminal's SIGINT did not reach them: their own sessions)
    assert (tmp_path / "graceful.sigint").read_text() == "1"
    assert (tmp_path / "stubborn.sigint").read_text() == "1"
    assert (tmp_path / "graceful.saved").exists(), "the graceful child had time to save"
    time.sleep(0.2)
    assert not any(pid_alive(p) for p in pids), "children and grandchildren are all gone"
    assert read_state(specs[0])["state"] == "interrupted" and read_state(specs[0])["returncode"] == 130
    assert read_state(specs[1])["state"] == "interrupted" and read_state(specs[1])["returncode"] == -signal.SIGKILL
    assert not (tmp_path / "never.pids").exists(), "the queued experiment never started"
    assert "interrupted: 00_graceful (relaunch the run to resume it)" in out
    assert read_state(specs[2])["state"] == "queued" and read_state(specs[2])["runner_pid"] is None


@pytest.mark.slow
def test_resume_after_interrupt_continues_from_the_checkpoint(tmp_path):
    target = 30_000
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("resume", [
            Experiment("cartpole", "{TINY_TRAIN} --train_for_env_steps={target} --report_every_sec=0.5 "
                       "--save_every_sec=1000", ParamGrid([("seed", [3])])),
        ])
    """)
    spec = specs_of(run_file, tmp_path)[0]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "sfx.runner.run", f"--run={run_file}",
                             f"--train_dir={tmp_path / 'td'}"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while True:  # interrupt once the training has made progress, well before its end
            status_file = spec.exp_dir / "status.json"
            if status_file.exists():
                try:
                    steps = json.loads(status_file.read_text())["env_steps"]
                except (ValueError, KeyError):
                    steps = 0
                if steps >= 3000:
                    break
            assert time.time() < deadline and proc.poll() is None, "training did not progress"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    assert not (spec.exp_dir / "done").exists()
    interrupted = json.loads((spec.exp_dir / "status.json").read_text())
    assert interrupted["status"] == "interrupted" and 0 < interrupted["env_steps"] < target
    saved_steps = max(int(p.stem.split("_")[-1]) for p in (spec.exp_dir / "checkpoint_p0").glob("checkpoint_*.pth"))
    assert saved_steps == interrupted["env_steps"], "the final checkpoint holds the interrupted step count"

    proc = runner([f"--run={run_file}"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (spec.exp_dir / "done").is_file()
    state = read_state(spec)
    assert state["state"] == "finished" and state["attempts"] == 2
    second_attempt = Path(state["log"]).read_text().split("attempt 2", 1)[1]
    resumed = re.search(r"policy 0 resumed at train step \d+, (\d+) env steps", second_attempt)
    assert resumed and int(resumed.group(1)) == saved_steps, second_attempt[-2000:]
    final = json.loads((spec.exp_dir / "status.json").read_text())
    assert final["status"] == "done" and final["env_steps"] >= target


def test_ranks_per_experiment_runs_torchrun_and_takes_that_many_gpus(tmp_path):
    """Dry run: the command under torchrun; with (fake) GPUs each experiment gets two, one per rank."""
    run_file = write_run(tmp_path, f"""
        RUN_DESCRIPTION = RunDescription("ranks", [
            Experiment("cartpole", "{TINY_TRAIN}", ParamGrid([("seed", [1])])),
        ])
    """)
    proc = runner([f"--run={run_file}", "--dry_run", "--ranks_per_experiment=2", "--num_gpus=0"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (f"{sys.executable} -m torch.distributed.run --standalone --nproc_per_node=2 --max_restarts=3 -m sfx.train "
            f"--env=gym_CartPole-v1") in proc.stdout
    proc = runner([f"--run={run_file}", "--dry_run", "--ranks_per_experiment=2", "--num_gpus=0", "--rank_restarts=0"],
                  tmp_path)
    assert proc.returncode == 0 and "--nproc_per_node=2 --max_restarts=0 -m sfx.train" in proc.stdout
    proc = runner([f"--run={run_file}", "--dry_run", "--ranks_per_experiment=2", "--rank_restarts=-1"], tmp_path)
    assert proc.returncode == 2 and "-1 must be an integer >= 0" in proc.stderr

    # a command that is not 'python -m <module>' cannot go through torchrun: said before anything starts
    run_file, env = _gpu_run(tmp_path, 2, sleep_sec=0)
    proc = runner([f"--run={run_file}", "--ranks_per_experiment=2"], tmp_path, env=env)
    assert proc.returncode != 0 and "must be 'python -m <module> ...'" in proc.stdout + proc.stderr
    proc = runner([f"--run={run_file}", "--ranks_per_experiment=3", "--dry_run"], tmp_path, env=env)
    assert proc.returncode != 0 and "--ranks_per_experiment=3 needs 3 GPU slots per experiment; there are 2 GPU(s)" \
        in proc.stdout + proc.stderr


def test_gpu_slots_hand_out_one_gpu_per_rank():
    from sfx_runner.backends.processes import _GpuSlots

    slots = _GpuSlots(["0", "1", "2", "3"], per_gpu=1)
    first, second = slots.acquire_many(2), slots.acquire_many(2)
    assert sorted((first + "," + second).split(",")) == ["0", "1", "2", "3"]
    slots.release(first)
    assert sorted(slots.acquire_many(2).split(",")) == sorted(first.split(","))


@pytest.mark.slow
def test_an_experiment_as_two_ranks_through_the_runner(tmp_path):
    run_file = write_run(tmp_path, """
        RUN_DESCRIPTION = RunDescription("ranks", [
            Experiment("cartpole", "python -m sfx.train --env=gym_CartPole-v1 --num_workers=1 --num_envs_per_worker=4 "
                                   "--device=cpu --hidden_size=64 --use_rnn=False --train_for_env_steps=20000",
                       ParamGrid([("seed", [1])])),
        ])
    """)
    proc = runner([f"--run={run_file}", "--ranks_per_experiment=2", "--num_gpus=0"], tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spec, = specs_of(run_file, tmp_path)
    assert (spec.exp_dir / "done").is_file()
    assert "rank 1 of 2" in (spec.exp_dir / "rank_1" / "sf_log.txt").read_text()


@pytest.mark.extended  # in ./all_tests.sh only with SFX_EXTENDED=1 (pytest.ini says why)
@pytest.mark.slow
def test_a_killed_rank_is_started_again_by_the_runner_and_every_rank_resumes(tmp_path):
    """kill -9 of rank 1 mid-run: torchrun (--max_restarts, from --rank_restarts) starts both ranks again,
    they resume from rank 0's last checkpoint and the experiment finishes."""
    import psutil

    run_file = write_run(tmp_path, """
        RUN_DESCRIPTION = RunDescription("ranks", [
            Experiment("cartpole", "python -m sfx.train --env=gym_CartPole-v1 --num_workers=1 --num_envs_per_worker=4 "
                                   "--device=cpu --hidden_size=64 --use_rnn=False --train_for_env_steps=150000 "
                                   "--save_every_sec=2 --distributed_timeout_sec=20",
                       ParamGrid([("seed", [1])])),
        ])
    """)
    spec, = specs_of(run_file, tmp_path)
    ckpt_dir = spec.exp_dir / "checkpoint_p0"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.Popen([sys.executable, "-m", "sfx.runner.run", f"--train_dir={tmp_path / 'td'}",
                             f"--run={run_file}", "--ranks_per_experiment=2", "--num_gpus=0"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not list(ckpt_dir.glob("checkpoint_*.pth")):
            time.sleep(0.5)
        assert list(ckpt_dir.glob("checkpoint_*.pth")), "rank 0 wrote no checkpoint"
        rank1 = [p for p in psutil.Process(proc.pid).children(recursive=True)
                 if "sfx.train" in " ".join(p.cmdline()) and p.environ().get("RANK") == "1"
                 and "torch.distributed.run" not in " ".join(p.cmdline())]
        assert rank1, "no rank 1 trainer found"
        os.kill(rank1[0].pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out[-3000:]
    assert (spec.exp_dir / "done").is_file()
    log = (spec.exp_dir / "sf_log.txt").read_text()
    assert "resumed at train step" in log, log[-3000:]
    # the restarted rank 1 took rank 0's weights and counters: the run ended at the target, counted once
    assert int((spec.exp_dir / "done").read_text().split("=")[1]) >= 150_000


@pytest.mark.slow
def test_a_killed_learner_is_restarted_by_the_runner_and_resumes_from_its_checkpoint(tmp_path):
    """kill -9 of the learner: the training stops with its checkpoint kept (the learner may not be restarted
    inside a training), and the runner starts the experiment again (--experiment_restarts), which resumes from
    the newest checkpoint there was: no env step lost beyond it, none counted twice, the restart recorded."""
    import psutil

    run_file = write_run(tmp_path, """
        RUN_DESCRIPTION = RunDescription("learner", [
            Experiment("cartpole", "python -m sfx.train --env=gym_CartPole-v1 --num_workers=2 --num_envs_per_worker=4 "
                                   "--device=cpu --hidden_size=64 --use_rnn=False --train_for_env_steps=120000 "
                                   "--batch_size=256 --save_every_sec=2 --set_workers_cpu_affinity=False --seed=1"),
        ])
    """)
    spec, = specs_of(run_file, tmp_path)
    ckpt_dir = spec.exp_dir / "checkpoint_p0"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "sfx.runner.run", f"--train_dir={tmp_path / 'td'}",
                             f"--run={run_file}", "--num_gpus=0", "--restart_backoff_sec=1"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(list(ckpt_dir.glob("checkpoint_*.pth"))) < 2:
            time.sleep(0.2)
        learner = json.loads((spec.exp_dir / "status.json").read_text())["components"]["learner_0"]
        os.kill(learner, signal.SIGKILL)
        # the newest checkpoint when the learner died (the coordinator's stop saves no other: the learner is gone)
        newest = max(int(p.stem.split("_")[2]) for p in ckpt_dir.glob("checkpoint_*.pth"))
        out, _ = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            for p in psutil.Process(proc.pid).children(recursive=True) + [psutil.Process(proc.pid)]:
                p.kill()
    assert proc.returncode == 0, out[-3000:]
    assert re.search(rf"RESTART {spec.name} \(exit code 1\) after \d+ s: restart 1 of 3 in 1 s", out), out[-3000:]
    log = (spec.exp_dir / "sf_log.txt").read_text()
    assert "stopping: learner_0 died (exit code -9); its last checkpoint is kept" in log
    resumed = [int(m) for m in re.findall(r"policy 0 resumed at train step \d+, (\d+) env steps", log)]
    assert resumed and resumed[-1] >= newest, (resumed, newest)
    state = read_state(spec)
    assert state["restarts"] == 1 and state["attempts"] == 2 and state["state"] == "finished"
    assert state["last_restart"]["returncode"] == 1
    assert 120_000 <= int((spec.exp_dir / "done").read_text().split("=")[1]) <= 120_000 + 24 * 256
