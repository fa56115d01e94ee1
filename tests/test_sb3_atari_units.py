"""Issue 54's SB3 reference on Atari, the parts that run without SB3's venv: bench/sb3_tb.py writes an Atari
report's curves at emulator frames (sfx's Atari x axis), and bench/sb3_baseline.py's unit helpers and --resume
rules (its Atari training itself needs bench/sb3_venv, which CI never installs)."""

from __future__ import annotations

import json

import pytest

from bench import sb3_baseline, sb3_tb
from sfx_tb.scalars import load_scalars


def atari_report(seeds=(0, 1)) -> dict:
    # the shape bench/sb3_baseline.py writes for an Atari env: SB3 timesteps in `curve`, frames beside them
    return {"algo": "ppo", "env": "PongNoFrameskip-v4", "window": 100, "hyperparams_entry": "atari", "n_envs": 8,
            "frames_per_step": 4, "max_frames": 40960, "versions": {"stable_baselines3": "2.x"},
            "seeds": [{"seed": s, "final": -20.0 + s, "env_steps": 10240, "frames": 40960,
                       "curve": [[1024, -21.0 + s], [5120, -20.5 + s], [10240, -20.0 + s]],
                       "curve_frames": [4096, 20480, 40960], "curve_seconds": [3.0, 15.0, 30.5]} for s in seeds]}


def test_an_atari_report_is_written_at_emulator_frames_and_says_so(tmp_path):
    path = tmp_path / "sb3_ppo_PongNoFrameskip-v4.json"
    path.write_text(json.dumps(atari_report()))
    folders = sb3_tb.convert(path, tmp_path / "train_dir", start_time=1_000_000.0)
    assert [f.name for f in folders] == ["sb3_ppo_pongnoframeskip-v4_see=0", "sb3_ppo_pongnoframeskip-v4_see=1"]
    cfg = json.loads((folders[0] / "cfg.json").read_text())
    assert cfg["x_unit"] == "frames" and cfg["frames_per_step"] == 4

    df = load_scalars("sb3_ppo*", tmp_path / "train_dir", metrics="reward")
    for seed in (0, 1):
        rows = df[df["seed"] == seed].sort_values("step")
        assert rows["step"].tolist() == [4096, 20480, 40960]  # SB3's timesteps x 4
        assert rows["value"].tolist() == [-21.0 + seed, -20.5 + seed, -20.0 + seed]
        assert rows["wall_time"].tolist() == pytest.approx([1_000_003.0, 1_000_015.0, 1_000_030.5])


def test_steps_on_request_and_inconsistent_or_impossible_units_refused(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(atari_report(seeds=(0,))))
    [folder] = sb3_tb.convert(path, tmp_path / "a", x="steps")
    assert json.loads((folder / "cfg.json").read_text())["x_unit"] == "env_steps"
    steps = load_scalars("*", tmp_path / "a", metrics="reward")["step"].tolist()
    assert sorted(steps) == [1024, 5120, 10240]

    bad = atari_report(seeds=(0, 1))
    bad["seeds"][1]["curve_frames"] = [4096, 20480, 40000]
    path.write_text(json.dumps(bad))
    assert sb3_tb.main([str(path), f"--dir={tmp_path / 'b'}"]) == 2
    assert "seed 1: curve_frames do not equal" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()  # refused before any seed's folder was written

    plain = atari_report(seeds=(0,))
    del plain["frames_per_step"]
    plain["env"] = "HalfCheetah-v5"
    path.write_text(json.dumps(plain))
    assert sb3_tb.main([str(path), f"--dir={tmp_path / 'c'}", "--x_unit=frames"]) == 2
    assert "no frames_per_step (not Atari)" in capsys.readouterr().err
    assert sb3_tb.main([str(path), f"--dir={tmp_path / 'c'}"]) == 0  # a non-Atari report: env steps, as before
    assert json.loads((tmp_path / "c" / "sb3_ppo_halfcheetah-v5_see=0" / "cfg.json").read_text())["x_unit"] == \
        "env_steps"


def test_frames_per_agent_step_from_the_zoo_entry_and_the_env():
    assert sb3_baseline.atari_wrapper_kwargs(["stable_baselines3.common.atari_wrappers.AtariWrapper"]) == {}
    assert sb3_baseline.atari_wrapper_kwargs(
        [{"stable_baselines3.common.atari_wrappers.AtariWrapper": {"frame_skip": 2}}]) == {"frame_skip": 2}
    assert sb3_baseline.atari_wrapper_kwargs("rl_zoo3.wrappers.TimeFeatureWrapper") is None
    assert sb3_baseline.atari_wrapper_kwargs(None) is None
    # NoFrameskip-v4 (frameskip 1) under AtariWrapper's default skip 4: 4 frames per SB3 timestep
    assert sb3_baseline.frames_per_step(1, {}, 4) == 4
    assert sb3_baseline.frames_per_step(1, {"frame_skip": 2}, 4) == 2
    assert sb3_baseline.frames_per_step(4, None, 4) == 4  # ALE/*-v5 without AtariWrapper: ALE's own skip
    with pytest.raises(sb3_baseline.BenchError, match="stochastic"):
        sb3_baseline.frames_per_step((2, 5), {}, 4)  # Pong-v4: frameskip drawn from 2..4
    assert sb3_baseline.steps_for_frames(10_000_000, 4) == 2_500_000
    assert sb3_baseline.steps_for_frames(10, 4) == 3  # rounded up: at least the frames asked for


def test_resume_takes_the_run_s_settings_and_only_a_few_overrides(tmp_path, capsys):
    args = sb3_baseline.parse_args(["--resume=x", "--max_frames=80000", "--threads=2"])
    assert args.given == {"resume", "max_frames", "threads"}
    with pytest.raises(SystemExit):
        sb3_baseline.parse_args(["--resume=x", "--env=PongNoFrameskip-v4"])
    assert "only --max_steps, --max_frames, --threads, --checkpoint_every may be given again, not --env" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit):
        sb3_baseline.parse_args(["--algo=ppo", "--env=PongNoFrameskip-v4", "--max_steps=1", "--max_frames=4"])
    with pytest.raises(SystemExit):
        sb3_baseline.parse_args(["--env=PongNoFrameskip-v4"])  # --algo is required without --resume

    out = tmp_path / "run"
    out.mkdir()
    (out / sb3_baseline.RUN_FILE).write_text(json.dumps({"args": {
        "algo": "ppo", "env": "PongNoFrameskip-v4", "seeds": "0,1", "threshold": None, "max_steps": None,
        "max_frames": 40960, "hyperparams_from": None, "threads": 1, "device": "cpu", "curve_every": 1000,
        "window": 100, "checkpoint_every": 20480}}))
    args = sb3_baseline.parse_args([f"--resume={out}", "--max_steps=20480", "--threads=2"])
    sb3_baseline.apply_resume(args)
    assert (args.algo, args.env, args.seed_list, args.checkpoint_every) == ("ppo", "PongNoFrameskip-v4", [0, 1], 20480)
    assert (args.max_steps, args.max_frames, args.threads, args.out) == (20480, None, 2, str(out))
    with pytest.raises(sb3_baseline.BenchError, match="no run.json"):
        sb3_baseline.apply_resume(sb3_baseline.parse_args([f"--resume={tmp_path}"]))
