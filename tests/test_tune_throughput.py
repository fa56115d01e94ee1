"""``python -m sfx.tune_throughput``: the grid built from the machine, pruned to the budget, bad input in one
line, and a real tiny run (2 points of 1 s on CartPole) whose table, JSON and printed command line are checked.
No throughput is asserted (the machine is shared): only that the figures are there and the winner is named."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sfx.registries import build_parser, parse_args
from sfx.errors import ConfigError
from sfx.tune_throughput import (DEFAULT_ENVS_PER_WORKER, GridPoint, build_grid, machine_axes, max_total_envs,
                                 parse_tune_args, point_priority, prune_grid, tuner_parser)

REPO = Path(__file__).resolve().parents[1]
MACHINE = {"cores": 2, "available_mb": 64_000.0}
# three tasks, one per worker: layouts of fewer than 3 workers never play one of them (sfx's own check)
MULTITASK = ["--env=multitask", "--multitask_envs=gym_CartPole-v1,gym_Acrobot-v1,gym_MountainCar-v0",
             "--multitask_assignment=worker"]


# --- the grid, pure ---------------------------------------------------------------------------------------

def test_machine_axes_follow_the_cores():
    axes = machine_axes(cores=16, available_mb=1e6)
    assert axes["num_workers"] == [8, 16, 32]
    assert axes["num_envs_per_worker"] == list(DEFAULT_ENVS_PER_WORKER)
    assert axes["worker_num_splits"] == [1, 2]
    assert axes["env_backend"] == [None]
    assert machine_axes(cores=1, available_mb=1e6)["num_workers"] == [1, 2]  # cores/2 rounds up to one worker
    assert machine_axes(cores=128, available_mb=1e6)["num_workers"] == [64]  # capped
    assert machine_axes(cores=2, available_mb=1e6, backends=["python", "envpool"])["env_backend"] == \
        ["python", "envpool"]


def test_machine_axes_cap_envs_by_memory():
    # 2 GiB free, half of it usable, 64 MiB an env: 16 envs in all; the fewest workers (1) may have 16
    axes = machine_axes(cores=2, available_mb=2048, env_memory_mb=64)
    assert max_total_envs(2048, 64) == 16
    assert axes["num_envs_per_worker"] == [4, 8, 16]
    # and the larger layouts are dropped point by point, with the reason
    points, skipped = build_grid(axes, max_envs=16)
    assert all(p.total_envs <= 16 for p in points)
    assert GridPoint(4, 16, 1) in {s.point for s in skipped}
    assert all("memory" in s.reason for s in skipped)
    # no memory at all still leaves the smallest layout
    assert machine_axes(cores=2, available_mb=1, env_memory_mb=64)["num_envs_per_worker"] == [4]


def test_build_grid_every_combination_in_order():
    axes = {"num_workers": [1, 2], "num_envs_per_worker": [4, 8], "worker_num_splits": [1, 2],
            "env_backend": ["python", "envpool"]}
    points, skipped = build_grid(axes)
    assert len(points) == 16 and not skipped
    assert points[0] == GridPoint(1, 4, 1, "python") and points[-1] == GridPoint(2, 8, 2, "envpool")
    assert points[0].flags() == ["--num_workers=1", "--num_envs_per_worker=4", "--worker_num_splits=1",
                                 "--env_backend=python"]
    assert GridPoint(2, 8, 2).flags()[-1] == "--worker_num_splits=2"  # no backend flag without a backend axis


def test_build_grid_invalid_splits():
    axes = {"num_workers": [2], "num_envs_per_worker": [6, 8], "worker_num_splits": [4], "env_backend": [None]}
    # from defaults: skipped with the reason
    points, skipped = build_grid(axes, explicit={"worker_num_splits"})
    assert points == [GridPoint(2, 8, 4)]
    assert skipped[0].point == GridPoint(2, 6, 4) and "do not split in 4" in skipped[0].reason
    # both values from the command line: one line that says what is allowed
    with pytest.raises(ConfigError, match=r"--num_envs_per_worker=6 is not a multiple of --worker_num_splits=4.*"
                                          r"may be 1, 2, 3, 6"):
        build_grid(axes, explicit={"num_envs_per_worker", "worker_num_splits"})
    with pytest.raises(ConfigError, match="the grid is empty"):
        build_grid({**axes, "num_envs_per_worker": [6]}, explicit={"worker_num_splits"})


def test_prune_keeps_the_middle_of_the_grid_first():
    axes = machine_axes(cores=2, available_mb=1e6)  # workers 1, 2, 4; envs 4..32; splits 1, 2
    points, _ = build_grid(axes)
    assert len(points) == 24
    kept, skipped = prune_grid(points, budget_sec=60, point_sec=20, priority=lambda p: point_priority(p, axes))
    assert len(kept) == 3 and len(skipped) == 21
    # the middle values (2 workers, 16 envs) with the first split count first, then one octave away
    assert kept[0] == GridPoint(2, 16, 1)
    assert {p.num_workers for p in kept} | {p.num_envs_per_worker for p in kept} <= {1, 2, 4, 8, 16, 32}
    assert all("--max_minutes" in s.reason for s in skipped)
    assert set(kept) | {s.point for s in skipped} == set(points)
    # a budget for everything keeps everything; no budget at all still keeps one point
    assert len(prune_grid(points, 24 * 20, 20)[0]) == 24
    assert len(prune_grid(points, 1, 20)[0]) == 1


def test_tuner_flags_are_not_sfx_train_flags():
    """The tuner's own flags pass nothing on: none may be a flag sfx.train (or a family) has."""
    own = {s for a in tuner_parser()._actions for s in a.option_strings} - {f"--{n}" for n in
                                                                            ("num_workers", "num_envs_per_worker",
                                                                             "worker_num_splits", "env_backend")}
    own.discard("-h")
    own.discard("--help")
    for env in ("gym_CartPole-v1", "atari_breakout"):
        sfx_flags = {s for a in build_parser(env)._actions for s in a.option_strings}
        assert not own & sfx_flags, (env, own & sfx_flags)


def test_parse_plans_the_default_grid_and_the_backends():
    req = parse_tune_args(["--env=gym_CartPole-v1", "--max_minutes=60"], machine=MACHINE)
    assert len(req.points) == 24 and not req.skipped
    assert req.passthrough == ["--env=gym_CartPole-v1"]
    req = parse_tune_args(["--env=gym_CartPole-v1", "--num_workers=2", "--num_envs_per_worker=8,16",
                           "--worker_num_splits=2", "--use_rnn=False", "--max_minutes=60"], machine=MACHINE)
    assert set(req.points) == {GridPoint(2, 8, 2), GridPoint(2, 16, 2)}
    assert req.passthrough == ["--env=gym_CartPole-v1", "--use_rnn=False"]
    # a family with --env_backend: its backends are an axis
    req = parse_tune_args(["--env=atari_breakout", "--num_workers=2", "--num_envs_per_worker=8",
                           "--worker_num_splits=2"], machine=MACHINE)
    backends = [p.env_backend for p in req.points]
    assert "python" in backends and set(backends) <= {"python", "envpool"}
    assert len(backends) == 2 or any("envpool is not installed" in n for n in req.notes)
    # points of the default grid that sfx's own checks refuse are skipped, with their reason
    req = parse_tune_args([*MULTITASK, "--max_minutes=60"], machine=MACHINE)
    assert {p.num_workers for p in req.points} == {4}
    assert {s.point.num_workers for s in req.skipped} == {1, 2}
    assert all("never plays" in s.reason for s in req.skipped)
    # a short budget prunes, and says so
    req = parse_tune_args(["--env=gym_CartPole-v1", "--max_minutes=1", "--seconds=5"], machine=MACHINE)
    assert 1 <= len(req.points) < 24 and len(req.points) + len(req.skipped) == 24
    assert all("--max_minutes" in s.reason for s in req.skipped)


@pytest.mark.parametrize("argv, message", [
    (["--env=gym_CartPole-v1", "--lerning_rate=0.1"], r"unrecognized argument '--lerning_rate=0.1'.*learning_rate"),
    (["--num_workers=2"], r"--env is required"),
    (["--env=gym_CartPole-v1", "--num_workers="], r"--num_workers= has an empty value"),
    (["--env=gym_CartPole-v1", "--num_workers=2,0"], r"'0' is not a positive integer"),
    (["--env=gym_CartPole-v1", "--num_envs_per_worker=two"], r"'two' is not a positive integer"),
    (["--env=gym_CartPole-v1", "--num_envs_per_worker=6", "--worker_num_splits=4"],
     r"--num_envs_per_worker=6 is not a multiple of --worker_num_splits=4.*may be 1, 2, 3, 6"),
    (["--env=gym_CartPole-v1", "--worker_num_splits=3"], r"the grid is empty.*do not split in 3"),
    (["--env=gym_CartPole-v1", "--env_backend=envpool"], r"--env_backend is not a flag of this env's family"),
    (["--env=atari_breakout", "--env_backend=jax"], r"--env_backend=jax is not a backend.*python, envpool"),
    (["--env=gym_CartPole-v1", "--algo=DUMMY_SAMPLER"], r"--algo=DUMMY_SAMPLER does not train"),
    (["--env=gym_CartPole-v1", "--timeout_seconds=3"], r"--timeout_seconds is the dummy sampler's"),
    (["--env=gym_CartPole-v1", "--seconds=0"], r"--seconds=0.0 must be > 0"),
    (["--env=gym_CartPole-v1", "--train=maybe"], r"--train=maybe must be a boolean"),
    (["--env=gym_CartPole-v1", "--train_top=0"], r"--train_top=0 must be >= 1"),
    (["--env=gym_CartPole-v1", "--seconds=abc"], r"argument --seconds: invalid float value: 'abc'"),
    (["--env=nope_Nothing"], r"--env=nope_Nothing matches no env family"),
    # a point sfx's own checks refuse, with an axis from the command line: named
    (MULTITASK + ["--num_workers=2,4"], r"^grid point 2 workers x 4 envs x 1 split: --multitask_assignment=worker"),
])
def test_bad_input_is_one_config_error(argv, message):
    with pytest.raises(ConfigError, match=message) as e:
        parse_tune_args(argv, machine=MACHINE)
    assert "\n" not in str(e.value)


def test_bad_input_on_the_command_line_exits_2():
    proc = subprocess.run([sys.executable, "-m", "sfx.tune_throughput", "--env=gym_CartPole-v1",
                           "--num_envs_per_worker=6", "--worker_num_splits=4"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("sfx: error: --num_envs_per_worker=6")


# --- a real run ---------------------------------------------------------------------------------------------

@pytest.mark.slow  # 19 s here on a quiet moment, 52 s while the 2 cores were busy (start-up is most of it)
def test_real_tiny_run_prints_the_fastest_command(tmp_path):
    """Two points of 1 s on CartPole through the command line: the table, the JSON, and a printed command line
    that sfx's own parser takes, with the fastest point's values."""
    out = tmp_path / "tune.json"
    proc = subprocess.run([sys.executable, "-m", "sfx.tune_throughput", "--env=gym_CartPole-v1", "--num_workers=1,2",
                           "--num_envs_per_worker=4", "--worker_num_splits=2", "--seconds=1", "--use_rnn=False",
                           f"--out={out}"], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d,]+)\s+([\d.]+)(.*)$", text, re.MULTILINE)
    assert [(w, e, s) for w, e, s, *_ in rows] == [("1", "4", "2"), ("2", "4", "2")], text
    assert sorted(float(r[4]) for r in rows)[-1] == 1.0  # the best sampler point is 1.00 of itself
    assert sum("fastest" in r[5] for r in rows) == 1

    data = json.loads(out.read_text())
    assert data["env"] == "gym_CartPole-v1" and data["seconds"] == 1.0 and data["machine"]["cores"] >= 1
    assert [r["status"] for r in data["sampler"]] == ["ok", "ok"]
    assert all(r["fps"] > 0 for r in data["sampler"])
    best = max(data["sampler"], key=lambda r: r["fps"])
    assert data["best"]["num_workers"] == best["num_workers"] and data["best"]["fps"] == best["fps"]

    # the printed line: the last line starting with python -m sfx.train, the same as the JSON's
    command = [ln for ln in text.splitlines() if ln.startswith("python -m sfx.train ")][-1]
    assert command == data["best"]["command"]
    argv = shlex.split(command)[3:]
    cfg = parse_args([*argv, f"--train_dir={tmp_path / 'train_dir'}"], resume=False)
    assert (cfg.num_workers, cfg.num_envs_per_worker, cfg.worker_num_splits) == (best["num_workers"], 4, 2)
    assert cfg.use_rnn is False and cfg.env == "gym_CartPole-v1"
    best_row = next(r for r in rows if "fastest" in r[5])
    assert int(best_row[0]) == best["num_workers"]
    assert f"{best['fps']:,.0f}" in text


def test_a_point_that_does_not_finish_is_reported(tmp_path):
    """A point killed by --point_timeout_sec is a row with its reason, not the end of the run."""
    from sfx.tune_throughput import format_report, tune

    req = parse_tune_args(["--env=gym_CartPole-v1", "--num_workers=1", "--num_envs_per_worker=2",
                           "--worker_num_splits=1", "--seconds=1", "--point_timeout_sec=0.5"])
    report = tune(req, progress=lambda s: None, work_root=str(tmp_path))
    assert [r.status for r in report.sampler] == ["timeout"]
    assert report.best is None and report.command() is None
    text = format_report(report)
    assert "timeout: killed after" in text and "no point finished" in text


@pytest.mark.slow  # a sampler point and a 25 s training
def test_train_mode_picks_the_fastest_training(tmp_path):
    """With --train the best sampler point also trains (sfx.train with --train_for_seconds), and the winner is a
    training: its FPS, counted from its first env steps, in the table, the JSON and the closing line."""
    from sfx.tune_throughput import format_report, tune

    req = parse_tune_args(["--env=gym_CartPole-v1", "--num_workers=2", "--num_envs_per_worker=8",
                           "--worker_num_splits=2", "--seconds=1", "--train=True", "--train_top=1",
                           "--train_seconds=25"])
    report = tune(req, progress=lambda s: None, work_root=str(tmp_path))
    assert [r.status for r in report.sampler] == ["ok"]
    assert [r.status for r in report.train] == ["ok"], report.train
    assert report.best is report.train[0] and report.best.fps > 0
    text = format_report(report)
    assert "train FPS" in text and f"fastest (training, {report.best.fps:,.0f} FPS):" in text
    assert report.to_json()["training"][0]["fps"] == report.best.fps
    assert report.command().endswith("--num_workers=2 --num_envs_per_worker=8 --worker_num_splits=2")
