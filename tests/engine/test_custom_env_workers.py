"""A family registered only in the coordinator's process reaches the worker processes."""

import gymnasium

from sfx.cfg import default_cfg
from sfx.engine import run_training
from sfx.envs import register_env
from sfx.envs.registry import unregister_env_family


def make_registered_cartpole(full_env_name, cfg, env_config, render_mode=None):
    return gymnasium.make("CartPole-v1")


def test_registered_env_trains_in_async_mode(tmp_path):
    # registered here, inside a test: the workers (forked from the forkserver, which never
    # imported this module) can only know it through the coordinator
    register_env("tst_registered_cartpole", make_registered_cartpole, default_overrides={"hidden_size": 16})
    try:
        cfg = default_cfg(env="tst_registered_cartpole", experiment="r", train_dir=str(tmp_path), num_workers=2,
                          num_envs_per_worker=2, rollout=16, recurrence=8, batch_size=64, device="cpu",
                          train_for_env_steps=2000, use_rnn=False)
        result = run_training(cfg)
    finally:
        unregister_env_family("tst_registered_cartpole")
    assert result["status"] == "done"
    assert result["env_steps"] >= 2000
