"""Slow atari_ checks: every Atari-57 game builds and plays through make_env; an asynchronous training run."""

import math

import numpy as np
import pytest

from sfx.registries import default_cfg
from sfx.engine import run_training
from sfx.envs import make_env
from sfx.envs.atari import ATARI_57


@pytest.mark.slow
def test_every_benchmark_game_builds_and_plays():
    for game in ATARI_57:
        env = make_env(default_cfg(f"atari_{game}", seed=0))
        obs, _ = env.reset()
        for _ in range(5):
            obs, *_ = env.step([env.action_space.sample()])
        assert obs[0].shape == (4, 84, 84) and obs[0].dtype == np.uint8, game
        env.close()


@pytest.mark.slow
def test_async_training_on_breakout_reports_whole_game_episodes(tmp_path):
    # random breakout games last ~150-300 agent steps (600-1200 frames): ~2 whole games in each of 4 envs
    cfg = default_cfg("atari_breakout", experiment="atari", train_dir=str(tmp_path), device="cpu", seed=1,
                      num_workers=2, num_envs_per_worker=2, worker_num_splits=2, rollout=32, recurrence=32,
                      batch_size=128, hidden_size=64, train_for_env_steps=8_000, report_every_sec=1.0,
                      experiment_summaries_interval=1.0, save_every_sec=1000)
    result = run_training(cfg)
    assert result["status"] == "done" and result["env_steps"] >= 8_000
    reward = result["reward"][0]
    # whole games, raw score: a random breakout player scores ~1-2 over 5 lives (never a negative score)
    assert reward is not None and not math.isnan(reward) and reward >= 0
