"""The dummy sampler: random actions through training's sampling path, with sane counts.

frames = agent steps x --env_frameskip, every agent counted; the env.step calls timed inside the
rollout workers (a separate count) x agents per env = agent steps. No throughput is asserted.
"""

import re
import subprocess
import sys
from pathlib import Path

import gymnasium
import numpy as np
import pytest

import sfx.train
from sfx.dummy_sampler import (NUM_STEP_TIME_BINS, format_result, parse_sampler_args, run_sampler, step_time_bin,
                               summarize_step_times)
from sfx.agents.dummy import random_action_rows

REPO = Path(__file__).resolve().parents[1]


def sampler_argv(tmp_path, env, **flags):
    base = {"env": env, "train_dir": str(tmp_path), "num_workers": 1, "num_envs_per_worker": 2,
            "report_every_sec": 1.0, "seed": 3}
    base.update(flags)
    return [f"--{k}={v}" for k, v in base.items()]


def check_counts(r: dict, frameskip: int, num_agents: int) -> None:
    assert r["status"] == "done"
    assert r["env_frameskip"] == frameskip and r["num_agents"] == num_agents
    assert r["agent_steps"] > 0
    assert r["frames"] == r["agent_steps"] * frameskip
    # two independent counts: the rollout workers' reports and the env.step calls timed in them
    assert r["agent_steps"] == r["env_steps"] * num_agents
    assert r["fps"] > 0 and r["sampling_sec"] > 0
    st = r["step_time"]
    assert st["count"] == r["env_steps"]
    assert 0 < st["p50_sec"] <= st["p99_sec"] and st["mean_sec"] <= st["max_sec"] < 60


def test_doom_basic_counts_frameskip(tmp_path):
    r = run_sampler(parse_sampler_args(sampler_argv(tmp_path, "doom_basic", timeout_seconds=1.5)))
    check_counts(r, frameskip=4, num_agents=1)
    assert r["episodes"] > 0 or r["agent_steps"] < 75  # basic's random episodes end within 300 tics
    assert (tmp_path / "dummy_sampler" / "sf_log.txt").is_file()


def test_two_agent_env_counts_every_agent(tmp_path):
    import sfx_examples.train_custom_multi_agent_env as example  # registers its env in every process

    r = run_sampler(parse_sampler_args(sampler_argv(tmp_path, example.ENV_NAME, timeout_seconds=1.5)))
    check_counts(r, frameskip=1, num_agents=2)
    assert r["episodes"] > 0


def test_cartpole_through_sfx_train_cli(tmp_path):
    # the command line users type: exit code, the FPS line and the env.step statistics
    cmd = [sys.executable, "-m", "sfx.train", "--algo=DUMMY_SAMPLER",
           *sampler_argv(tmp_path, "gym_CartPole-v1", sample_env_frames=20_000, num_envs_per_worker=4)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r"^FPS [\d,]+ over [\d.]+ s of sampling", out, re.M), out
    frames, steps, skip = (int(x.replace(",", "")) for x in
                           re.search(r"^frames ([\d,]+) = agent steps ([\d,]+) x frameskip (\d+)", out, re.M).groups())
    assert skip == 1 and frames == steps >= 20_000
    assert re.search(r"^env\.step in rollout workers: mean [\d.]+ [um]?s, p50 .* p99 ", out, re.M), out
    assert "FPS (1s/10s/60s/300s)" in proc.stderr  # the periodic status line


def test_bad_flags_exit_2_and_sfx_train_dispatches(tmp_path, capsys):
    assert sfx.train.main(["--algo=DUMMY_SAMPLER", "--env=gym_CartPole-v1", f"--train_dir={tmp_path}",
                           "--sample_env_frames=0"]) == 2
    assert "--sample_env_frames=0 must be a positive integer" in capsys.readouterr().err
    assert sfx.train.main(["--algo=DUMMY_SAMPLER", "--env=gym_CartPole-v1", f"--train_dir={tmp_path}",
                           "--timeout_seconds=-1"]) == 2
    assert sfx.train.requested_algo(["--env=x", "--algo", "DUMMY_SAMPLER"]) == "DUMMY_SAMPLER"
    assert sfx.train.requested_algo(["--env=x"]) is None


def test_parse_reads_no_saved_cfg_and_timeout_alone_lifts_the_frame_budget(tmp_path):
    (tmp_path / "dummy_sampler").mkdir()
    (tmp_path / "dummy_sampler" / "cfg.json").write_text('{"env": "gym_CartPole-v1", "num_workers": 7}')
    cfg = parse_sampler_args([f"--train_dir={tmp_path}", "--env=gym_CartPole-v1", "--num_workers=1",
                              "--timeout_seconds=5"])
    assert (cfg.algo, cfg.experiment, cfg.num_workers, cfg.timeout_seconds) == ("DUMMY_SAMPLER", "dummy_sampler", 1, 5)
    assert "sample_env_frames" not in cfg.explicit_args


def test_step_time_histogram_percentiles():
    d = np.array([1e-5] * 98 + [1e-3, 2.0])
    counts = np.bincount(step_time_bin(d), minlength=NUM_STEP_TIME_BINS)
    s = summarize_step_times(counts, float(d.sum()), float(d.max()))
    assert s["count"] == 100 and s["max_sec"] == 2.0
    assert s["mean_sec"] == pytest.approx(d.mean())
    assert s["p50_sec"] == pytest.approx(1e-5, rel=0.06)  # bin centres: within half a bin (10^(1/48))
    assert s["p99_sec"] == pytest.approx(1e-3, rel=0.06)
    assert step_time_bin(np.array([0.0, 1e9]))[[0, 1]].tolist() == [0, NUM_STEP_TIME_BINS - 1]
    assert np.isnan(summarize_step_times(np.zeros(NUM_STEP_TIME_BINS), 0.0, 0.0)["mean_sec"])


@pytest.mark.parametrize("space,k", [
    (gymnasium.spaces.Discrete(5, start=2), 1),
    (gymnasium.spaces.Tuple([gymnasium.spaces.Discrete(3), gymnasium.spaces.Discrete(2)]), 2),
    (gymnasium.spaces.MultiDiscrete([4, 2, 3]), 3),
    (gymnasium.spaces.Box(-1.0, 2.0, (2, 2), np.float32), 4),
])
def test_random_actions_are_stored_rows_within_the_space(space, k):
    from sfx.algo.distributions import action_shape, action_to_env

    rows = random_action_rows(space, 500, np.random.default_rng(0))
    assert rows.shape == (500, k) == (500, action_shape(space)) and rows.dtype == np.float32
    assert all(space.contains(action_to_env(space, row)) for row in rows)
    if not isinstance(space, gymnasium.spaces.Box):
        assert len({tuple(r) for r in rows}) > 1


def test_format_result_names_every_count():
    r = {"status": "done", "env": "e", "num_workers": 2, "num_envs_per_worker": 4, "num_agents": 2, "frames": 800,
         "agent_steps": 200, "env_frameskip": 4, "env_steps": 100, "episodes": 3, "fps": 400.0, "sampling_sec": 2.0,
         "startup_sec": 1.0, "step_time": summarize_step_times(np.zeros(NUM_STEP_TIME_BINS), 0, 0),
         "step_time_per_worker": []}
    text = format_result(r)
    assert "frames 800 = agent steps 200 x frameskip 4 (env.step calls 100 x 2 agents)" in text
    assert "FPS 400 over 2.0 s of sampling" in text
