"""Short real trainings through the EnvPool backend (serial mode, one worker): they train, report episodes and
count env steps as the Python envs do (frames, every agent step once, none for EnvPool's reset calls)."""

import math

import pytest

pytest.importorskip("envpool", reason="the envpool extra is not installed (pip install -e .[envpool])")

pytestmark = pytest.mark.slow  # whole trainings (~10 s each alone, 30+ on a loaded machine)

import sfx  # noqa: E402

SERIAL = {"device": "cpu", "serial_mode": True, "num_workers": 1, "num_envs_per_worker": 4, "worker_num_splits": 1,
          "rollout": 32, "recurrence": 32, "batch_size": 128, "seed": 1}


def test_atari_pong_trains_through_envpool(tmp_path):
    # a 400-frame cap: games of 100 agent steps, so episodes end (truncated) and report within the budget
    result = sfx.train(env="atari_pong", experiment="pong", train_dir=str(tmp_path), env_backend="envpool",
                       atari_max_episode_frames=400, train_for_env_steps=8192, **SERIAL)
    assert result.status == "done" and result.stop_reason == "train_for_env_steps"
    train_steps = result.stats["train_step"][0]
    # frames: every trained sample is one agent step of 4 frames (no step EnvPool spends on a reset is counted)
    assert result.env_steps == train_steps * SERIAL["batch_size"] * 4 == 8192
    assert -21 <= result.reward <= 21  # whole games' raw scores reached the statistics
    assert math.isfinite(result.stats["train_stats"][0]["loss/total"])
    assert result.checkpoint is not None
    assert result.cfg.env_backend == "envpool"


def test_procgen_starpilot_trains(tmp_path):
    # the family's IMPALA-CNN, one pass over each batch (its default 8 minibatches x 3 epochs are for long runs)
    result = sfx.train(env="procgen_starpilot", experiment="starpilot", train_dir=str(tmp_path),
                       train_for_env_steps=2048, num_batches_per_iteration=1, ppo_epochs=1, **SERIAL)
    assert result.status == "done" and result.stop_reason == "train_for_env_steps"
    # one agent step per game frame: every trained sample is one env step
    assert result.env_steps == result.stats["train_step"][0] * SERIAL["batch_size"] == 2048
    assert math.isfinite(result.reward) and result.reward >= 0  # starpilot's rewards are kills, never negative
    assert math.isfinite(result.stats["train_stats"][0]["loss/total"])
    assert result.checkpoint is not None
