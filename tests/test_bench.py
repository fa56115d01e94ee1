"""bench/: the synthetic image env is what its docstring says, and the throughput script runs.

No timing is asserted anywhere: benchmarks give figures, not pass/fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench import bench_throughput
from bench.image_env import EPISODE_STEPS, PREFIX, ScrollingTargetEnv, parse_size
from sfx.cfg import ConfigError, parse_args
from sfx.envs import make_env


def test_image_env_frames_rewards_and_time_limit():
    env = ScrollingTargetEnv(128, 72, render_mode="rgb_array")
    obs, _ = env.reset(seed=5)
    assert obs.shape == (3, 72, 128) and obs.dtype == np.uint8 and env.observation_space.contains(obs)
    assert env.render().shape == (72, 128, 3)
    total_matched, total_reward = 0, 0.0
    for t in range(1, EPISODE_STEPS + 1):
        target = env._target  # the quadrant on screen when the agent acts
        action = t % 4
        obs, reward, terminated, truncated, _ = env.step(action)
        total_matched += action == target
        total_reward += reward
        assert not terminated
        assert truncated == (t == EPISODE_STEPS)
    assert total_reward == total_matched > 0


def test_image_env_shows_the_target_quadrant():
    env = ScrollingTargetEnv(128, 72)
    env.reset(seed=0)
    for _ in range(50):
        obs, *_ = env.step(0)
        # the square is the only pure white: it must sit in the target's quadrant
        white = np.argwhere((obs == 255).all(axis=0))
        row, col = divmod(env._target, 2)
        assert white.size and (white[:, 0] >= row * 36).all() and (white[:, 0] < (row + 1) * 36).all()
        assert (white[:, 1] >= col * 64).all() and (white[:, 1] < (col + 1) * 64).all()


def test_image_env_family_is_registered_and_checks_its_name(tmp_path):
    cfg = parse_args([f"--env={PREFIX}96x64", f"--train_dir={tmp_path}", "--device=cpu"])
    env = make_env(cfg)
    assert env.num_agents == 1 and env.observation_space.shape == (3, 64, 96)
    env.close()
    assert parse_size(f"{PREFIX}128x72") == (128, 72)
    with pytest.raises(ConfigError, match=f"{PREFIX}WIDTHxHEIGHT"):
        parse_args([f"--env={PREFIX}big", f"--train_dir={tmp_path}"])


def test_table_relates_to_the_cartpole_baseline():
    rows = [{"name": "cartpole", "env": "gym_CartPole-v1", "workers": 2, "envs_per_worker": 16,
             "samples_per_sec": 1000.0, "status": "done"},
            {"name": "image", "env": "bench_image_128x72", "workers": 2, "envs_per_worker": 8,
             "samples_per_sec": 250.0, "status": "done"}]
    lines = bench_throughput.format_table(rows).splitlines()
    assert lines[0].split() == ["env", "workers", "envs/worker", "samples/s", "vs", "CartPole", "status"]
    assert lines[2].split()[3:5] == ["1,000", "1.00x"]
    assert lines[3].split()[3:5] == ["250", "0.25x"]


@pytest.mark.slow
def test_throughput_script_trains_the_image_env_in_worker_processes(capsys):
    # the family must reach the spawned rollout workers, or the run fails
    rc = bench_throughput.main(["--seconds=8", "--only=image", "--num_workers=1", "--image_envs_per_worker=2",
                                "--device=cpu", "--", "--batch_size=64", "--hidden_size=32"])
    out = capsys.readouterr().out
    assert rc == 0, out
    row = next(line for line in out.splitlines() if line.startswith("bench_image_128x72"))
    assert row.split()[-1] == "done" and float(row.split()[3].replace(",", "")) > 0


def test_throughput_reports_a_missing_sample_factory_venv_as_skipped(tmp_path):
    from bench import throughput

    args = throughput.parse_bench_args(["--tiny", f"--sf_python={tmp_path / 'nowhere' / 'bin' / 'python'}"])
    r = throughput.measure_sf_training(args, tmp_path)
    assert r["status"] == "skipped" and "setup_sample_factory.sh" in r["reason"]
    table = throughput.format_table([("raw limit: 2 processes", {"status": "done", "fps": 20000.0}),
                                     ("Sample Factory 2.1.1 training", r)])
    assert table.splitlines()[2].split()[-2:] == ["20,000", "done"]
    assert table.splitlines()[3].split()[4:6] == ["-", "skipped:"]
    grid = throughput.format_scaling({"1x4": 1000.0, "2x4": 1900.0}, [1, 2], [4, 8]).splitlines()
    assert grid[1].split() == ["1", "1,000", "-"] and grid[2].split() == ["2", "1,900", "-"]


@pytest.mark.slow
def test_throughput_script_tiny_mode_measures_every_row(tmp_path, capsys):
    import json

    from bench import throughput

    rc = throughput.main(["--tiny", "--scaling", f"--out_dir={tmp_path}"])
    out = capsys.readouterr().out
    assert rc == 0, out
    summary = json.loads((tmp_path / "throughput.json").read_text())
    for key in ("raw", "raw_many", "sampler", "sfx"):
        assert summary["results"][key]["status"] == "done" and summary["results"][key]["fps"] > 0, out
    sf = summary["results"]["sf"]
    if throughput.SF_VENV.joinpath("bin", "python").exists():
        assert sf["status"] == "done" and sf["fps"] > 0, out
    else:
        assert sf["status"] == "skipped" and "skipped" in out
    assert "ratios: sfx dummy sampler / raw limit = " in out
    assert set(summary["scaling"]) == {"1x2", "1x4"} and all(v > 0 for v in summary["scaling"].values())
    assert (tmp_path / "throughput.png").stat().st_size > 1000
    assert (tmp_path / "throughput_scaling.png").stat().st_size > 1000


def test_learner_step_bench_times_every_variant(capsys):
    from bench import learner_step

    assert learner_step.main(["--steps=1", "--batch_size=64", "--rollout=16"]) == 0
    out = capsys.readouterr().out
    for label in ("float32, NCHW", "float32, channels_last", "bf16 encoder, channels_last"):
        assert label in out
    assert "speed-up per learner step" in out
