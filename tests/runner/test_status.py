"""Runner state files and ``--status``: which state each experiment is in, and the table / JSON."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sfx_runner import Experiment, ParamGrid, RunDescription
from sfx_runner.cli import main
from sfx_runner.state import experiment_finished, log_path, read_state, state_path, write_state
from sfx_runner.status import collect_status, format_age, format_status_table

RUN_MODULE = """
from sfx_runner import Experiment, ParamGrid, RunDescription
RUN_DESCRIPTION = RunDescription("st", [Experiment("e", "python -m sfx.train --env=gym_CartPole-v1",
                                                   ParamGrid([("seed", list(range(8)))]))])
"""


@pytest.fixture
def specs(tmp_path):
    (tmp_path / "st_run.py").write_text(RUN_MODULE)
    run = RunDescription("st", [Experiment("e", "python -m sfx.train --env=gym_CartPole-v1",
                                           ParamGrid([("seed", list(range(8)))]))])
    return run.generate_experiments(tmp_path / "td")


def trainer_status(spec, **fields):
    spec.exp_dir.mkdir(parents=True, exist_ok=True)
    doc = {"status": "running", "env_steps": 1500, "train_for_env_steps": 3000, "reward": [12.5], "fps": 2500.0,
           "elapsed_sec": 3.0, "updated": time.time(), "pid": 999_999_999}
    doc.update(fields)
    (spec.exp_dir / "status.json").write_text(json.dumps(doc))


@pytest.fixture
def alive():
    """A live process whose command line names experiment 01 (as a real experiment's would)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--experiment=01_e_see=1"])
    yield proc.pid
    proc.kill()
    proc.wait()


def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_states_from_runner_state_and_trainer_status(specs, alive):
    s = specs
    # 0: finished: the done file wins over everything else
    write_state(s[0], state="running", backend="processes", pid=dead_pid())
    trainer_status(s[0], status="done", env_steps=3072)
    (s[0].exp_dir / "done").write_text("env_steps=3072\n")
    # 1: running, its process alive
    write_state(s[1], state="running", backend="processes", pid=alive)
    trainer_status(s[1])
    # 2: the runner said running, the process is gone, no done file: a runner that died
    write_state(s[2], state="running", backend="processes", pid=dead_pid())
    trainer_status(s[2])
    # 3: failed with its exit code
    write_state(s[3], state="failed", backend="processes", returncode=2)
    # 4: queued by a runner that is gone -> never started; 5: queued by a live runner
    write_state(s[4], state="queued", backend="processes", runner_pid=dead_pid())
    write_state(s[5], state="queued", backend="processes", runner_pid=os.getpid())
    # 6: a Slurm job: its pid lives on another machine, the runner's word is kept
    write_state(s[6], state="running", backend="slurm", pid=dead_pid(), job_id="123_6")
    # 7: nothing at all
    rows = collect_status(s)
    assert [r["state"] for r in rows] == ["finished", "running", "stopped", "failed", "not started", "queued",
                                          "running", "not started"]
    assert rows[0]["env_steps"] == 3072 and rows[1]["reward"] == [12.5] and rows[1]["fps"] == 2500.0
    assert rows[3]["returncode"] == 2 and rows[6]["job_id"] == "123_6"
    assert rows[7]["updated"] is None and rows[7]["env_steps"] is None
    assert rows[1]["folder"] == str(s[1].exp_dir) and rows[1]["log"] == str(log_path(s[1]))


def test_trainer_status_alone_for_experiments_started_by_hand(specs):
    trainer_status(specs[0], status="interrupted")
    trainer_status(specs[1], status="running", pid=os.getpid())
    trainer_status(specs[2], status="running", pid=dead_pid())
    assert [r["state"] for r in collect_status(specs[:3])] == ["interrupted", "running", "stopped"]


def test_table_columns_and_formatting(specs, monkeypatch):
    specs[0].train_dir.mkdir(parents=True)
    monkeypatch.chdir(specs[0].train_dir.parent)
    now = time.time()
    write_state(specs[0], state="interrupted", backend="processes", returncode=130)
    trainer_status(specs[0], env_steps=1_234_567, train_for_env_steps=10_000_000, reward=[12.3456, None],
                   fps=15234.4, updated=now - 125)
    write_state(specs[1], state="failed", backend="processes", returncode=-9)
    rows = collect_status(specs[:2])
    rows[0]["updated"] = now - 125  # independent of how long writing took
    text = format_status_table(rows, now=now)
    lines = text.splitlines()
    assert lines[0].split() == ["experiment", "state", "env_steps", "reward", "fps", "updated", "folder"]
    first = lines[1].split()
    assert first[0] == "00_e_see=0"
    assert "1,234,567/10,000,000" in first and "12.35/-" in first and "15,234" in first
    assert "2m" in first and first[-1] == os.path.join("st", "00_e_see=0"), "folder relative to cwd when inside"
    assert "failed (-9)" in lines[2]
    assert lines[3].startswith("2 experiment(s): ") and "1 failed" in lines[3]
    assert lines[4] == f"logs: {os.path.join('st', '.runner', 'logs')}/"
    widths = {len(line.split("  ")[0]) for line in lines[:3]}
    assert len(widths) == 1, "columns are aligned"


@pytest.mark.parametrize("seconds,text", [(0, "0s ago"), (59.9, "59s ago"), (60, "1m ago"), (7200, "2h ago"),
                                          (3 * 86400 + 5, "3d ago"), (-5, "0s ago")])
def test_format_age(seconds, text):
    assert format_age(seconds) == text


def test_status_command_table_and_json(specs, tmp_path, capsys):
    trainer_status(specs[3], status="done", env_steps=3000)
    (specs[3].exp_dir / "done").write_text("x")
    args = [f"--run={tmp_path / 'st_run.py'}", f"--train_dir={tmp_path / 'td'}", "--status"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "03_e_see=3  finished" in out and "8 experiment(s): 7 not started, 1 finished" in out
    assert main(args + ["--json", "--only=*see=3,*see=5"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["experiment"], r["state"]) for r in rows] == [("03_e_see=3", "finished"), ("05_e_see=5", "not started")]
    assert not (tmp_path / "td" / "st" / ".runner").exists(), "--status writes nothing"
    assert main(args[:2] + ["--json"]) == 2
    assert "--json only goes with --status" in capsys.readouterr().err


def test_write_state_merges_and_is_atomic(specs):
    spec = specs[0]
    assert read_state(spec) is None
    first = write_state(spec, state="queued", backend="processes")
    assert first["attempts"] == 0 and first["pid"] is None and first["log"] == str(log_path(spec))
    second = write_state(spec, state="running", pid=42, attempts=1)
    assert second["backend"] == "processes" and second["pid"] == 42 and second["updated"] >= first["updated"]
    assert read_state(spec) == second
    assert [p.name for p in state_path(spec).parent.iterdir()] == [state_path(spec).name], "no temporary files left"
    with pytest.raises(ValueError):
        write_state(spec, state="exploded")
    with pytest.raises(ValueError):
        write_state(spec, backend="kubernetes")
    state_path(spec).write_text("{half a fi")
    assert read_state(spec) is None, "an unreadable state file counts as none, it does not crash a status"


def test_experiment_finished_is_the_done_file(specs):
    spec = specs[0]
    assert not experiment_finished(spec)
    write_state(spec, state="finished", backend="processes", returncode=0)
    assert not experiment_finished(spec), "only the trainer's done file says finished"
    spec.exp_dir.mkdir(parents=True)
    (spec.exp_dir / "done").write_text("")
    assert experiment_finished(spec)
    assert isinstance(spec.exp_dir, Path)
